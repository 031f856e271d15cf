//! CLI golden tests for `tono-seal classify` and `tono-seal policy check`
//! (no root needed).

mod common;

use common::{stderr, stdout, tono};

#[test]
fn classify_answers_each_line_in_order_and_survives_garbage() {
    let input = concat!(
        "{\"tool\":\"http_get\",\"args\":{\"url\":\"https://example.com/\"}}\n",
        "not json\n",
        "{\"tool\":\"http_get\",\"args\":{\"url\":\"http://0x7f.1/\"}}\n",
        "{\"tool\":\"shell\",\"args\":{\"command\":\"id\"}}\n",
        "{\"tool\":\"http_get\",\"args\":{\"url\":\"https://example.com/\",\"url\":\"http://169.254.169.254/\"}}\n",
    );
    let o = tono(&["classify"], input.as_bytes());
    assert!(o.status.success(), "{}", stderr(&o));
    let got: Vec<(String, String)> = stdout(&o)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["verdict"].as_str().unwrap().to_owned(),
                v["code"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want = [
        ("stay", "public_read"),
        ("refuse", "call_not_json"),
        ("drop", "ip_not_public"),
        ("drop", "side_effect"),
        ("refuse", "call_duplicate_key"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn policy_check_accepts_aliases_and_rejects_a_side_effect_stay() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.json");
    std::fs::write(
        &good,
        r#"{"aliases":{"WebFetch":"http_get","Bash":"shell"}}"#,
    )
    .unwrap();
    let o = tono(&["policy", "check", good.to_str().unwrap()], b"");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o)
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["WebFetch", "http_get", "may", "stay"]),
        "{}",
        stdout(&o)
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"stay":["shell"]}"#).unwrap();
    let o = tono(&["policy", "check", bad.to_str().unwrap()], b"");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("can never stay"), "{}", stderr(&o));
    let o = tono(&["classify", "--policy", bad.to_str().unwrap()], b"{}");
    assert_eq!(
        o.status.code(),
        Some(2),
        "a bad policy stops classify before any verdict"
    );
}
