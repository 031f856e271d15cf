//! Who a run goes as: the Cloud is asked before every run, and its answer
//! is turned into a [`RunAs`] or a [`NoTurn`] by one pure function.
//!
//! Guarantees:
//! - [`who_runs`] asks the [`Cloud`] exactly once per run and keeps nothing:
//!   there is no cache, so a changed answer takes effect at the next run;
//! - [`resolve`] is pure and total: every (question, answer) pair gives a
//!   [`RunAs`] or a [`NoTurn`], and anything that does not fit (an answer
//!   about a person for unattended work, an allotted uid or gid of 0 or in the
//!   system range, a bad login name) is a [`NoTurn`], never a guess;
//! - a [`RunAs`] can only be made by [`resolve`], so code that takes one
//!   (a provider's sign-in, a tool call) cannot be handed a user the Cloud
//!   did not name for this run;
//! - a person's own login is brought into a home only when the Cloud says,
//!   for this very run, that they are a member of the tenant
//!   ([`RunAs::may_bring_login`]).
#![forbid(unsafe_code)]

use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::user::{valid_login_name, TargetUser, UserSpec};

/// The lowest uid and gid the Cloud may allot: below is the system range.
pub const FIRST_ALLOTTED_ID: u32 = crate::user::allowed::FIRST_ALLOTTED_ID;

/// A Linux user as the Cloud allotted it: a name and exact numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllottedUser {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// The user's own group id.
    pub gid: u32,
}

impl AllottedUser {
    /// Why these numbers or this name can never be a run's user, if so.
    pub fn unusable(&self) -> Option<String> {
        if let Err(why) = valid_login_name(&self.name) {
            return Some(format!(
                "the allotted name {:?} is not a login name: {why}",
                self.name.escape_debug().to_string()
            ));
        }
        for (what, id) in [("uid", self.uid), ("gid", self.gid)] {
            if id < FIRST_ALLOTTED_ID || id == u32::MAX {
                return Some(format!(
                    "the allotted {what} {id} of {} is root, in the system range, or -1",
                    self.name
                ));
            }
        }
        None
    }
}

/// How an agent's users are set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// Each person who talks to the agent runs as their own user.
    PerPerson,
    /// Everyone shares the agent's one login and one sandbox.
    SharedLogin,
}

/// Who caused the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Speaker {
    /// A person, by the Cloud's id.
    Person(String),
    /// A schedule fired.
    Schedule,
    /// An announcement is delivered.
    Announcement,
}

/// What kind of run is about to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// A conversation turn.
    Turn,
    /// A skill's inference.
    SkillInference,
    /// A skill's program.
    SkillProgram,
    /// A provider's sign-in: brings a login into a home.
    SignIn,
    /// A provider's sign-out.
    SignOut,
    /// A provider's status check.
    StatusCheck,
    /// Copying a person's existing login into a home.
    LoginImport,
}

impl RunKind {
    /// Whether this run puts a person's login into a home.
    pub fn brings_login(self) -> bool {
        matches!(self, Self::SignIn | Self::LoginImport)
    }
}

/// What the worker asks the Cloud before a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// The tenant.
    pub tenant: String,
    /// The agent.
    pub agent: String,
    /// Who caused the run.
    pub speaker: Speaker,
    /// What is about to run.
    pub kind: RunKind,
}

/// What the Cloud says of the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentAnswer {
    /// The agent exists and runs.
    Active {
        /// How its users are set up.
        kind: AgentKind,
        /// The agent's own user.
        user: AllottedUser,
    },
    /// The agent is deleted or disabled.
    Gone,
}

/// What the Cloud says of a speaking person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PersonAnswer {
    /// A member of the tenant, with their allotted user.
    Member {
        /// The person's user in this tenant.
        user: AllottedUser,
    },
    /// Allowed to talk to the agent, but without an account.
    AllowedNoAccount,
    /// Allowed to talk to the agent, with an account but no membership.
    AllowedNoMembership,
    /// Not allowed to talk to the agent.
    NotAllowed,
    /// Was a member, has left the tenant.
    Left,
}

/// The Cloud's whole answer for one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// The agent.
    pub agent: AgentAnswer,
    /// The person, for a run a person caused; `None` for unattended work.
    pub person: Option<PersonAnswer>,
}

/// Why the Cloud could not be asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the Cloud could not answer: {0}")]
pub struct CloudError(pub String);

/// The Cloud: asked before every run, never cached.
pub trait Cloud {
    /// Answers one question.
    fn ask(&self, question: &Question) -> impl Future<Output = Result<Answer, CloudError>> + Send;
}

/// Whether a run gets the memories and inference set-up ("brains") that go
/// with its user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Brains {
    /// The run has its user's brains.
    Yes,
    /// The run has none.
    No,
}

/// The user a run goes as, as the Cloud named it for this run. Only
/// [`resolve`] makes one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunAs {
    user: AllottedUser,
    kind: RunKind,
    brains: Brains,
    bring_login: bool,
    rule: &'static str,
}

impl RunAs {
    /// The allotted user.
    pub fn user(&self) -> &AllottedUser {
        &self.user
    }

    /// The kind of run the Cloud was asked about.
    pub fn kind(&self) -> RunKind {
        self.kind
    }

    /// Whether the run has its user's brains.
    pub fn brains(&self) -> Brains {
        self.brains
    }

    /// Whether this run may bring a login into the user's home (a sign-in
    /// or a login import by a current member).
    pub fn may_bring_login(&self) -> bool {
        self.bring_login
    }

    /// Which rule chose the user, for logs and outcomes.
    pub fn rule(&self) -> &'static str {
        self.rule
    }

    /// The passwd entry of the user, which must have exactly the allotted
    /// numbers.
    pub fn target(&self) -> Result<TargetUser, RunAsError> {
        let entry = TargetUser::lookup(&UserSpec::Name(self.user.name.clone()))
            .map_err(|e| RunAsError::NotProvisioned(e.to_string()))?;
        if entry.uid != self.user.uid || entry.gid != self.user.gid {
            return Err(RunAsError::Mismatch {
                name: self.user.name.clone(),
                allotted: (self.user.uid, self.user.gid),
                found: (entry.uid, entry.gid),
            });
        }
        Ok(entry)
    }
}

/// Why a [`RunAs`] has no usable passwd entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunAsError {
    /// The user does not exist (yet) on this machine.
    #[error("the run's user is not provisioned here: {0}")]
    NotProvisioned(String),
    /// The user exists with other numbers than the Cloud allotted.
    #[error("user {name} is allotted uid/gid {allotted:?} but has {found:?} here")]
    Mismatch {
        /// The name.
        name: String,
        /// What the Cloud allotted.
        allotted: (u32, u32),
        /// What the passwd file says.
        found: (u32, u32),
    },
}

/// Why nothing runs.
#[must_use = "no turn means nothing may be started"]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NoTurn {
    /// A stable machine-readable code.
    pub code: &'static str,
    /// A human reason.
    pub reason: String,
}

/// The decision for one run.
#[must_use = "the resolution decides whose user a run goes as"]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// Run as this user.
    Run(RunAs),
    /// Start nothing.
    NoTurn(NoTurn),
}

fn no_turn(code: &'static str, reason: impl Into<String>) -> Resolution {
    Resolution::NoTurn(NoTurn {
        code,
        reason: reason.into(),
    })
}

fn run_as(
    question: &Question,
    user: &AllottedUser,
    brains: Brains,
    rule: &'static str,
) -> Resolution {
    let bring_login = question.kind.brings_login();
    match user.unusable() {
        Some(why) => no_turn("allotment_invalid", why),
        None => Resolution::Run(RunAs {
            user: user.clone(),
            kind: question.kind,
            brains,
            bring_login,
            rule,
        }),
    }
}

/// Decides whose user a run goes as. Pure: the same question and answer
/// always give the same resolution.
pub fn resolve(question: &Question, answer: &Answer) -> Resolution {
    let (kind, agent_user) = match &answer.agent {
        AgentAnswer::Active { kind, user } => (*kind, user),
        AgentAnswer::Gone => return no_turn("agent_gone", "the agent is deleted or disabled"),
    };
    let login_refused = |who: &str| {
        no_turn(
            "login_not_allowed",
            format!("{who}: their login is never brought into a home"),
        )
    };
    match (&question.speaker, &answer.person) {
        (Speaker::Schedule | Speaker::Announcement, None) => {
            if question.kind.brings_login() {
                return no_turn(
                    "login_not_allowed",
                    "unattended work never brings a login into a home",
                );
            }
            run_as(question, agent_user, Brains::Yes, "unattended_agent_user")
        }
        (Speaker::Person(_), Some(person)) => match person {
            PersonAnswer::Member { user } => match kind {
                AgentKind::PerPerson => {
                    run_as(question, user, Brains::Yes, "per_person_speaker_user")
                }
                AgentKind::SharedLogin => {
                    run_as(question, agent_user, Brains::Yes, "shared_login_agent_user")
                }
            },
            PersonAnswer::AllowedNoAccount | PersonAnswer::AllowedNoMembership => {
                if question.kind.brings_login() {
                    return login_refused("someone unknown to the tenant");
                }
                run_as(
                    question,
                    agent_user,
                    Brains::No,
                    "unknown_agent_user_no_brains",
                )
            }
            PersonAnswer::Left => {
                if question.kind.brings_login() {
                    return login_refused("someone who left the tenant");
                }
                run_as(
                    question,
                    agent_user,
                    Brains::No,
                    "left_agent_user_no_brains",
                )
            }
            PersonAnswer::NotAllowed => no_turn(
                "speaker_not_allowed",
                "the speaker may not talk to this agent",
            ),
        },
        (Speaker::Person(_), None) => no_turn(
            "answer_mismatch",
            "the Cloud said nothing of the person who spoke",
        ),
        (Speaker::Schedule | Speaker::Announcement, Some(_)) => no_turn(
            "answer_mismatch",
            "the Cloud answered about a person for unattended work",
        ),
    }
}

/// Asks the Cloud (once) and resolves; a Cloud that cannot answer means no
/// turn.
pub async fn who_runs<C: Cloud>(cloud: &C, question: &Question) -> Resolution {
    match cloud.ask(question).await {
        Ok(answer) => resolve(question, &answer),
        Err(e) => no_turn("cloud_unavailable", e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, id: u32) -> AllottedUser {
        AllottedUser {
            name: name.into(),
            uid: id,
            gid: id,
        }
    }

    fn question(speaker: Speaker, kind: RunKind) -> Question {
        Question {
            tenant: "t1".into(),
            agent: "a1".into(),
            speaker,
            kind,
        }
    }

    fn active(kind: AgentKind) -> AgentAnswer {
        AgentAnswer::Active {
            kind,
            user: user("agent", 5000),
        }
    }

    /// What a row expects: a user (name, brains, brings login) or a code.
    #[derive(Debug, PartialEq)]
    enum Want {
        Run(&'static str, Brains, bool),
        No(&'static str),
    }

    fn got(r: &Resolution) -> Want {
        match r {
            Resolution::Run(a) => Want::Run(
                if a.user().name == "agent" {
                    "agent"
                } else if a.user().name == "ann" {
                    "ann"
                } else {
                    "other"
                },
                a.brains(),
                a.may_bring_login(),
            ),
            Resolution::NoTurn(n) => Want::No(n.code),
        }
    }

    #[test]
    fn the_resolution_table() {
        use AgentKind::*;
        use Brains::{No as NoB, Yes};
        use PersonAnswer::*;
        use RunKind::*;
        use Want::{No, Run};
        let ann = || Speaker::Person("ann".into());
        let member = || {
            Some(Member {
                user: user("ann", 6000),
            })
        };
        #[rustfmt::skip]
        let rows: Vec<(AgentAnswer, Speaker, RunKind, Option<PersonAnswer>, Want)> = vec![
            (active(PerPerson), ann(), Turn, member(), Run("ann", Yes, false)),
            (active(PerPerson), ann(), SkillInference, member(), Run("ann", Yes, false)),
            (active(PerPerson), ann(), SkillProgram, member(), Run("ann", Yes, false)),
            (active(PerPerson), ann(), SignIn, member(), Run("ann", Yes, true)),
            (active(PerPerson), ann(), LoginImport, member(), Run("ann", Yes, true)),
            (active(PerPerson), ann(), SignOut, member(), Run("ann", Yes, false)),
            (active(PerPerson), ann(), StatusCheck, member(), Run("ann", Yes, false)),
            (active(SharedLogin), ann(), Turn, member(), Run("agent", Yes, false)),
            (active(SharedLogin), ann(), SignIn, member(), Run("agent", Yes, true)),
            (active(PerPerson), ann(), Turn, Some(AllowedNoAccount), Run("agent", NoB, false)),
            (active(PerPerson), ann(), Turn, Some(AllowedNoMembership), Run("agent", NoB, false)),
            (active(SharedLogin), ann(), Turn, Some(AllowedNoAccount), Run("agent", NoB, false)),
            (active(SharedLogin), ann(), Turn, Some(AllowedNoMembership), Run("agent", NoB, false)),
            (active(PerPerson), ann(), SignIn, Some(AllowedNoAccount), No("login_not_allowed")),
            (active(PerPerson), ann(), Turn, Some(NotAllowed), No("speaker_not_allowed")),
            (active(SharedLogin), ann(), Turn, Some(NotAllowed), No("speaker_not_allowed")),
            (active(PerPerson), ann(), SignIn, Some(NotAllowed), No("speaker_not_allowed")),
            (active(PerPerson), ann(), Turn, Some(Left), Run("agent", NoB, false)),
            (active(SharedLogin), ann(), Turn, Some(Left), Run("agent", NoB, false)),
            (active(PerPerson), ann(), LoginImport, Some(Left), No("login_not_allowed")),
            (active(PerPerson), ann(), SignIn, Some(Left), No("login_not_allowed")),
            (active(PerPerson), Speaker::Schedule, Turn, None, Run("agent", Yes, false)),
            (active(SharedLogin), Speaker::Schedule, Turn, None, Run("agent", Yes, false)),
            (active(PerPerson), Speaker::Announcement, Turn, None, Run("agent", Yes, false)),
            (active(SharedLogin), Speaker::Announcement, SkillProgram, None, Run("agent", Yes, false)),
            (active(PerPerson), Speaker::Schedule, SignIn, None, No("login_not_allowed")),
            (AgentAnswer::Gone, ann(), Turn, member(), No("agent_gone")),
            (AgentAnswer::Gone, Speaker::Schedule, Turn, None, No("agent_gone")),
            (active(PerPerson), ann(), Turn, None, No("answer_mismatch")),
            (active(PerPerson), Speaker::Schedule, Turn, member(), No("answer_mismatch")),
            (active(PerPerson), ann(), Turn, Some(Member { user: user("ann", 0) }), No("allotment_invalid")),
            (active(PerPerson), ann(), Turn, Some(Member { user: user("ann", 999) }), No("allotment_invalid")),
            (active(PerPerson), ann(), Turn, Some(Member { user: user("../ann", 6000) }), No("allotment_invalid")),
            (AgentAnswer::Active { kind: SharedLogin, user: AllottedUser { name: "agent".into(), uid: 5000, gid: 0 } }, ann(), Turn, member(), No("allotment_invalid")),
            (AgentAnswer::Active { kind: PerPerson, user: user("agent", u32::MAX) }, Speaker::Schedule, Turn, None, No("allotment_invalid")),
        ];
        assert!(rows.len() >= 20);
        let mut bad = Vec::new();
        for (i, (agent, speaker, kind, person, want)) in rows.into_iter().enumerate() {
            let q = question(speaker, kind);
            let a = Answer { agent, person };
            let r = resolve(&q, &a);
            if got(&r) != want {
                bad.push(format!("row {i}: {q:?} {a:?}: want {want:?}, got {r:?}"));
            }
            assert_eq!(resolve(&q, &a), r, "row {i}: resolve is not pure");
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    /// A Cloud whose answer the test changes, counting questions.
    struct FakeCloud {
        answer: std::sync::Mutex<Result<Answer, CloudError>>,
        asked: std::sync::atomic::AtomicUsize,
    }

    impl Cloud for FakeCloud {
        fn ask(&self, _q: &Question) -> impl Future<Output = Result<Answer, CloudError>> + Send {
            self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let answer = self.answer.lock().unwrap().clone();
            std::future::ready(answer)
        }
    }

    #[test]
    fn every_run_asks_once_and_follows_a_changed_answer() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let member = Answer {
            agent: active(AgentKind::PerPerson),
            person: Some(PersonAnswer::Member {
                user: user("ann", 6000),
            }),
        };
        let cloud = FakeCloud {
            answer: std::sync::Mutex::new(Ok(member)),
            asked: 0.into(),
        };
        let q = question(Speaker::Person("ann".into()), RunKind::Turn);
        let count = || cloud.asked.load(std::sync::atomic::Ordering::SeqCst);
        let first = rt.block_on(who_runs(&cloud, &q));
        assert_eq!(got(&first), Want::Run("ann", Brains::Yes, false));
        assert_eq!(count(), 1);
        // Ann leaves between two messages: her next run is the agent's.
        *cloud.answer.lock().unwrap() = Ok(Answer {
            agent: active(AgentKind::PerPerson),
            person: Some(PersonAnswer::Left),
        });
        let second = rt.block_on(who_runs(&cloud, &q));
        assert_eq!(got(&second), Want::Run("agent", Brains::No, false));
        assert_eq!(count(), 2);
        // And her login import, asked again at import time, is refused.
        let import = question(Speaker::Person("ann".into()), RunKind::LoginImport);
        assert_eq!(
            got(&rt.block_on(who_runs(&cloud, &import))),
            Want::No("login_not_allowed")
        );
        assert_eq!(count(), 3);
        // A Cloud that cannot answer starts nothing.
        *cloud.answer.lock().unwrap() = Err(CloudError("timeout".into()));
        assert_eq!(
            got(&rt.block_on(who_runs(&cloud, &q))),
            Want::No("cloud_unavailable")
        );
        assert_eq!(count(), 4);
    }
}
