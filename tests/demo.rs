//! `tono-seal demo`, the README's main job, as a test: two throwaway users
//! each unseal their own secret, are denied the other's, and a scan of the
//! worker's memory finds neither value beside a control it does find.

mod common;

#[test]
fn the_demo_holds_every_property() {
    need_root!();
    let _starting = common::CLI_STARTS.read().unwrap_or_else(|p| p.into_inner());
    let out = std::process::Command::new(common::tono_bin())
        .arg("demo")
        .output()
        .unwrap();
    let text = common::stdout(&out);
    assert!(out.status.success(), "{text}{}", common::stderr(&out));
    assert!(text.trim_end().ends_with("every property held"), "{text}");
    let held = text
        .lines()
        .filter(|l| l.ends_with(" held") && !l.starts_with("every"))
        .count();
    assert_eq!(held, 9, "two unseals, six denials, one memory scan: {text}");
    assert!(
        text.contains("read "),
        "the scan says how much it read: {text}"
    );
}
