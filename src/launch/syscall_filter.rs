//! The call's syscall filter: the kernel interfaces a tool never needs and
//! most recent Linux privilege escalations started from, refused before
//! the tool's first instruction.
//!
//! Guarantees:
//! - The launcher installs the filter after its drop held and
//!   `no_new_privs` is set, before anything user-chosen runs (a program, a
//!   file tool, a probe); every process the tool starts inherits it and
//!   cannot remove it (seccomp filters only stack).
//! - A refused call fails with `EPERM` (`clone3`: `ENOSYS`), never a kill,
//!   so a program that probes for a feature degrades as it would where the
//!   kernel lacks it.
//! - The programs are compiled by `seccompiler`, not written by hand. Its
//!   prologue kills a process that enters the kernel with another
//!   architecture's numbers (a 32-bit `int 0x80`), so no number below is
//!   bypassed that way; on a kernel that runs x32 syscalls each number is
//!   also refused with the x32 bit set (`0x40000000`), the other door into
//!   an x86_64 kernel. Where the kernel does not run them (asked each
//!   launch: `getpid` with the x32 bit), every such number is `ENOSYS`
//!   from the kernel itself, and the program is half as long: its install
//!   is a cost of every call.
//! - An operator may refuse more calls by name (`refuse_syscalls` of the
//!   env config); a name the filter's table does not know is refused when
//!   the config is loaded and again by the launcher
//!   (`syscall_filter_invalid`), never skipped. `seccompiler` resolves them
//!   to x86_64 numbers only: on a kernel that runs x32 syscalls a call
//!   with the operator's refusals is refused (`syscall_filter_incomplete`)
//!   rather than run with them open through x32.
//!
//! What is refused, against Docker's default profile (moby
//! `profiles/seccomp/default.json`), which refuses each of these too:
//!
//! | calls | why |
//! |---|---|
//! | `unshare`, `clone` with `CLONE_NEWUSER` | a user namespace makes the tool root of it, with every capability there: the start of most recent LPEs, and a way to mount over the call's view |
//! | `clone3` (`ENOSYS`) | its flags sit in memory a filter cannot read; libc falls back to `clone`, which is filtered |
//! | `keyctl`, `add_key`, `request_key` | keyrings are not namespaced: the user keyring of the uid is shared by all its calls |
//! | `bpf`, `perf_event_open`, `userfaultfd` | kernel attack surface a tool has no use for |
//! | `io_uring_setup`, `io_uring_enter`, `io_uring_register` | syscalls that bypass per-call filtering, and a common LPE start |
//! | `kexec_load`, `kexec_file_load`, `init_module`, `finit_module`, `delete_module` | need capabilities a call never has; refused here as well, as Docker does |
//! | `setns` | joining a user namespace some other process of the uid made (outside any call) gives back what `CLONE_NEWUSER` is refused for; a filter cannot see which kind of namespace an fd is |
//!
//! Docker refuses more (`mount`, `ptrace` on old kernels, `setns`, …): each
//! needs a capability the tool does not hold (its bounding set is empty),
//! so the kernel already refuses them.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::report::{LaunchError, Stage};

/// The syscalls refused with `EPERM` whatever their arguments, by name and
/// x86_64 number.
pub const REFUSED: &[(&str, i64)] = &[
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("setns", libc::SYS_setns),
];

/// The syscalls refused with `EPERM` when their first argument asks for a
/// new user namespace.
pub const REFUSED_WITH_NEW_USER_NAMESPACE: &[(&str, i64)] =
    &[("unshare", libc::SYS_unshare), ("clone", libc::SYS_clone)];

/// Set in the number of an x32 syscall (`__X32_SYSCALL_BIT`).
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// `kexec_load` has an x32 number of its own (528), not its x86_64 one.
const X32_KEXEC_LOAD: i64 = X32_SYSCALL_BIT | 528;

/// The filter a call's tool runs under: one compiled program per action.
#[derive(Debug, Clone)]
pub struct SyscallFilter {
    programs: Vec<BpfProgram>,
}

fn invalid(message: String) -> LaunchError {
    LaunchError::new(Stage::Plan, "syscall_filter_invalid", message)
}

/// Both numbers of an x86_64 syscall: its own and its x32 one.
fn both_abis(nr: i64) -> [i64; 2] {
    let x32 = if nr == libc::SYS_kexec_load {
        X32_KEXEC_LOAD
    } else {
        nr | X32_SYSCALL_BIT
    };
    [nr, x32]
}

/// The numbers by which a syscall is entered on this kernel: its x86_64
/// one, and its x32 one where `x32` (the kernel runs x32 syscalls).
fn numbers(nr: i64, x32: bool) -> impl Iterator<Item = i64> {
    both_abis(nr).into_iter().take(if x32 { 2 } else { 1 })
}

/// The `EPERM` rules: every call of [`REFUSED`], and [`REFUSED_WITH_NEW_USER_NAMESPACE`]
/// when `CLONE_NEWUSER` is set in its first argument.
fn eperm_rules(x32: bool) -> Result<BTreeMap<i64, Vec<SeccompRule>>, LaunchError> {
    let mut rules = BTreeMap::new();
    for (_, nr) in REFUSED {
        for nr in numbers(*nr, x32) {
            rules.insert(nr, Vec::new());
        }
    }
    let newuser = libc::CLONE_NEWUSER as u64;
    for (name, nr) in REFUSED_WITH_NEW_USER_NAMESPACE {
        let rule = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(newuser),
            newuser,
        )
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(|e| invalid(format!("the rule for {name}: {e}")))?;
        for nr in numbers(*nr, x32) {
            rules.insert(nr, vec![rule.clone()]);
        }
    }
    Ok(rules)
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: i32,
    what: &str,
) -> Result<BpfProgram, LaunchError> {
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        TargetArch::x86_64,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|e| invalid(format!("compiling {what}: {e}")))
}

/// Whether `name` can be a syscall's name: what is checked before the name
/// reaches the compiler's table.
fn plausible_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl SyscallFilter {
    /// The filter: the built-in refusals, and `extra` (syscall names the
    /// operator refuses besides, each with `EPERM`).
    pub fn build(extra: &[String]) -> Result<Self, LaunchError> {
        Self::build_for(extra, crate::sys::x32_abi_enabled())
    }

    /// [`SyscallFilter::build`] for a kernel that runs x32 syscalls or not.
    fn build_for(extra: &[String], x32: bool) -> Result<Self, LaunchError> {
        let mut programs = vec![compile(
            eperm_rules(x32)?,
            libc::EPERM,
            "the refused calls",
        )?];
        let clone3: BTreeMap<i64, Vec<SeccompRule>> = numbers(libc::SYS_clone3, x32)
            .map(|nr| (nr, Vec::new()))
            .collect();
        programs.push(compile(clone3, libc::ENOSYS, "clone3")?);
        if !extra.is_empty() {
            programs.push(Self::operator_program(extra)?);
            if x32 {
                return Err(LaunchError::new(
                    Stage::Plan,
                    "syscall_filter_incomplete",
                    "x32 syscalls may run here (this kernel runs them, or a seccomp filter \
                     of this process's own, a container runtime's or a service manager's, \
                     leaves that unknown), and the operator's refused syscalls are compiled \
                     for x86_64 numbers only; boot with syscall.x32=n and run without such \
                     a filter, or drop refuse_syscalls from the env config",
                ));
            }
        }
        Ok(Self { programs })
    }

    /// The operator's names, compiled by `seccompiler`'s own syscall table
    /// (an unknown name is an error, never skipped).
    fn operator_program(extra: &[String]) -> Result<BpfProgram, LaunchError> {
        if let Some(bad) = extra.iter().find(|n| !plausible_name(n)) {
            return Err(invalid(format!(
                "{bad:?} is not a syscall name (lowercase letters, digits and _)"
            )));
        }
        let filter: Vec<serde_json::Value> = extra
            .iter()
            .map(|name| serde_json::json!({ "syscall": name }))
            .collect();
        let json = serde_json::json!({
            "operator": {
                "mismatch_action": "allow",
                "match_action": { "errno": libc::EPERM },
                "filter": filter,
            }
        });
        let text = serde_json::to_vec(&json).map_err(|e| invalid(e.to_string()))?;
        let mut map = seccompiler::compile_from_json(&text[..], TargetArch::x86_64)
            .map_err(|e| invalid(format!("the operator's refused syscalls: {e}")))?;
        map.remove("operator")
            .ok_or_else(|| invalid("the operator's filter did not compile".into()))
    }

    /// Installs the filter on this thread (the launcher has one) and so on
    /// everything it starts. `no_new_privs` must already be set.
    pub fn install(&self) -> Result<(), LaunchError> {
        for program in &self.programs {
            seccompiler::apply_filter(program).map_err(|e| {
                let errno = match &e {
                    seccompiler::Error::Seccomp(io) | seccompiler::Error::Prctl(io) => {
                        io.raw_os_error()
                    }
                    _ => None,
                };
                LaunchError {
                    stage: Stage::Drop,
                    code: "syscall_filter_refused".into(),
                    message: format!("installing the call's syscall filter: {e}"),
                    errno,
                }
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refused_number_is_refused_in_both_abis_where_the_kernel_runs_x32() {
        let rules = eperm_rules(true).unwrap();
        for (name, nr) in REFUSED.iter().chain(REFUSED_WITH_NEW_USER_NAMESPACE) {
            for n in both_abis(*nr) {
                assert!(
                    rules.contains_key(&n),
                    "{name} ({n:#x}) is not in the filter"
                );
            }
        }
        assert_eq!(
            rules.len(),
            2 * (REFUSED.len() + REFUSED_WITH_NEW_USER_NAMESPACE.len())
        );
        assert_eq!(both_abis(libc::SYS_kexec_load)[1], 0x4000_0000 + 528);
        assert_eq!(both_abis(libc::SYS_keyctl)[1], 0x4000_0000 + 250);
    }

    /// Where the kernel runs no x32 syscall the x32 numbers are the
    /// kernel's `ENOSYS` and are left out: every x86_64 number is still
    /// there, and the program is about half as long (what a call pays to
    /// install it).
    #[test]
    fn without_x32_every_x86_64_number_is_refused_and_the_program_is_shorter() {
        let rules = eperm_rules(false).unwrap();
        for (name, nr) in REFUSED.iter().chain(REFUSED_WITH_NEW_USER_NAMESPACE) {
            assert!(
                rules.contains_key(nr),
                "{name} ({nr:#x}) is not in the filter"
            );
            assert!(!rules.contains_key(&both_abis(*nr)[1]));
        }
        assert_eq!(
            rules.len(),
            REFUSED.len() + REFUSED_WITH_NEW_USER_NAMESPACE.len()
        );
        let len = |x32| -> usize {
            SyscallFilter::build_for(&[], x32)
                .unwrap()
                .programs
                .iter()
                .map(Vec::len)
                .sum()
        };
        let (with, without) = (len(true), len(false));
        eprintln!("BPF instructions: {with} with x32, {without} without");
        assert!(without * 10 < with * 6, "{without} of {with}");
        // The operator's names are x86_64 only: where x32 runs, refused.
        let e = SyscallFilter::build_for(&["ptrace".into()], true).unwrap_err();
        assert_eq!(e.code, "syscall_filter_incomplete");
        assert!(SyscallFilter::build_for(&["ptrace".into()], false).is_ok());
    }

    #[test]
    fn an_unknown_or_malformed_operator_name_is_refused_by_name() {
        let e = SyscallFilter::build(&["no_such_call".into()]).unwrap_err();
        assert_eq!(e.code, "syscall_filter_invalid");
        assert!(e.message.contains("no_such_call"), "{}", e.message);
        let e = SyscallFilter::build(&["ptrace; rm".into()]).unwrap_err();
        assert_eq!(e.code, "syscall_filter_invalid");
        assert_eq!(
            SyscallFilter::build(&["ptrace".into()])
                .unwrap()
                .programs
                .len(),
            3
        );
        assert_eq!(SyscallFilter::build(&[]).unwrap().programs.len(), 2);
    }

    /// Seccomp filters are per thread: a thread of the test installs it
    /// and sees each call refused with the filter's errno, beside calls
    /// that still work (the control).
    #[test]
    fn a_thread_under_the_filter_gets_eperm_and_other_calls_still_work() {
        let filter = SyscallFilter::build(&["mincore".into()]).unwrap();
        let seen = std::thread::spawn(move || {
            // Before: a multi-threaded process is refused a user namespace
            // by the kernel with EINVAL, the control that EPERM below is
            // the filter's.
            let before = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER);
            filter.install().unwrap();
            let after = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER);
            let keyring = crate::sys::session_keyring_id();
            let pid = nix::unistd::getpid();
            (before, after, keyring, pid)
        })
        .join()
        .unwrap();
        assert_eq!(seen.0, Err(nix::errno::Errno::EINVAL));
        assert_eq!(seen.1, Err(nix::errno::Errno::EPERM));
        assert_eq!(seen.2, Err(nix::errno::Errno::EPERM));
        assert_eq!(seen.3, nix::unistd::getpid());
    }
}
