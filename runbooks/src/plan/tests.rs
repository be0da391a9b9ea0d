use super::*;

fn check(yaml: &str) -> Result<Runbook, CheckError> {
    parse(yaml, Path::new("drill.yaml"), &[], None)
}

fn problems(yaml: &str) -> String {
    check(yaml).expect_err("the runbook should be refused").problems.join("\n")
}

/// The shape in the issue, verbatim apart from the verify step (no config here).
const ISSUE_EXAMPLE: &str = r#"
title: Restore orders from backup
objectives: {rto: 15m}
variables: {app_conf: /etc/app/db.conf}
steady_state:
  - name: app answers
    http: {url: "http://127.0.0.1:8080/health", expect_status: 200}
steps:
  - name: point the app at the restored database
    shell: {command: "cp ${app_conf}.restored ${app_conf}", expect_exit: 0}
    timeout: 30s
    on_failure: rollback
    recovery: true
  - name: confirm writes work
    sql: {dsn: "postgres://app@127.0.0.1/orders", query: "select 1", expect: "1"}
rollbacks:
  - name: put the old config back
    shell: {command: "cp ${app_conf}.bak ${app_conf}"}
"#;

#[test]
fn the_documented_shape_parses_with_defaults() {
    let rb = check(ISSUE_EXAMPLE).unwrap();
    assert_eq!(rb.rto, Some(Duration::from_secs(900)));
    assert_eq!(rb.steps[0].timeout, Duration::from_secs(30));
    assert_eq!(rb.steps[0].line, 9);
    assert!(rb.steps[0].recovery);
    assert_eq!(rb.steps[1].on_failure, OnFailure::Rollback, "steps roll back by default");
    assert_eq!(rb.rollbacks[0].on_failure, OnFailure::Continue, "every rollback is tried by default");
    assert_eq!(rb.variables["app_conf"], "/etc/app/db.conf");
}

#[test]
fn an_unknown_key_names_its_line_and_the_known_keys() {
    let p = problems("title: t\nsteps:\n  - name: a\n    shel: {command: ls}\n");
    assert!(p.contains("drill.yaml") && p.contains("line 4"), "{p}");
    assert!(p.contains("unknown field `shel`") && p.contains("shell"), "{p}");
}

#[test]
fn a_wrong_type_names_its_line() {
    let p = problems("title: t\nsteps:\n  - name: a\n    shell: {command: ls}\n    recovery: maybe\n");
    assert!(p.contains("line 5"), "{p}");
    let p = problems("title: t\nsteps:\n  - name: a\n    shell: {command: ls, expect_exit: zero}\n");
    assert!(p.contains("line 4"), "{p}");
}

#[test]
fn a_missing_field_names_its_line() {
    let p = problems("title: t\nsteps:\n  - name: a\n    shell: {command: ls}\n  - shell: {command: ls}\n");
    assert!(p.contains("line 5") && p.contains("missing field `name`"), "{p}");
    let p = problems("steps:\n  - name: a\n    shell: {command: ls}\n");
    assert!(p.contains("missing field `title`"), "{p}");
}

#[test]
fn a_step_does_exactly_one_thing() {
    let p = problems("title: t\nsteps:\n  - name: a\n    timeout: 5s\n");
    assert!(p.contains("drill.yaml:3") && p.contains("expected one of shell, sql"), "{p}");
    let p = problems("title: t\nsteps:\n  - name: a\n    shell: {command: ls}\n    wait: {for: 1s}\n");
    assert!(p.contains("drill.yaml:3") && p.contains("shell and wait"), "{p}");
}

#[test]
fn every_problem_is_reported_at_once_with_its_line() {
    let p = problems(
        "title: t\nobjectives: {rto: soon}\nsteps:\n  - name: a\n    shell: {command: \"echo ${nope}\"}\n    timeout: 0s\n  - name: a\n    sql: {query: select 1}\n",
    );
    assert!(p.contains("drill.yaml:2: objectives.rto"), "{p}");
    assert!(p.contains("drill.yaml:6: step \"a\": timeout"), "{p}");
    assert!(p.contains("drill.yaml:4: step \"a\": variable nope is not defined"), "{p}");
    assert!(p.contains("drill.yaml:7") && p.contains("two steps are named"), "{p}");
    assert!(p.contains("exactly one of `dsn` and `target`"), "{p}");
}

#[test]
fn variables_must_exist_by_the_time_a_step_runs() {
    let p = problems(
        "title: t\nsteps:\n  - name: a\n    shell: {command: \"echo ${later}\"}\n  - name: b\n    shell: {command: \"echo x\", capture: later}\n",
    );
    assert!(p.contains("drill.yaml:3") && p.contains("later is not defined"), "{p}");
    let ok = check(
        "title: t\nsteps:\n  - name: b\n    shell: {command: \"echo x\", capture: later}\n  - name: a\n    shell: {command: \"echo ${later} $HOME $$x\"}\n",
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
}

#[test]
fn var_overrides_replace_values_and_typos_are_refused() {
    let yaml = "title: t\nvariables: {port: 5432}\nsteps:\n  - name: a\n    shell: {command: \"echo ${port}\"}\n";
    let rb = parse(yaml, Path::new("d.yaml"), &[("port".into(), "6543".into())], None).unwrap();
    assert_eq!(rb.variables["port"], "6543");
    let e = parse(yaml, Path::new("d.yaml"), &[("prot".into(), "1".into())], None).unwrap_err();
    assert!(e.to_string().contains("--var prot") && e.to_string().contains("port"), "{e}");
}

#[test]
fn targets_without_a_config_are_listed_not_refused() {
    let yaml = "title: t\nsteps:\n  - name: v\n    verify: {target: orders}\n  - name: bad\n    shell: {command: \"echo ${nope}\"}\n";
    // Everything else is still checked...
    let p = problems(yaml);
    assert!(p.contains("nope") && !p.contains("orders"), "{p}");
    // ...and a valid runbook names the targets it could not check, with their lines.
    let rb =
        parse("title: t\nsteps:\n  - name: v\n    verify: {target: orders}\n", Path::new("d.yaml"), &[], None).unwrap();
    assert_eq!(rb.unresolved_targets, vec![(3, "orders".to_string())]);
}

#[test]
fn waits_poll_checks_by_name_and_refuse_what_they_cannot_poll() {
    let ok = check(
        "title: t\nsteady_state:\n  - name: up\n    shell: {command: \"true\"}\nsteps:\n  - name: w\n    wait: {until_step: up, every: 200ms}\n",
    )
    .unwrap();
    match &ok.steps[0].action {
        Action::Wait(Wait::Until { every, .. }) => assert_eq!(*every, Duration::from_millis(200)),
        other => panic!("{other:?}"),
    }
    let p = problems("title: t\nsteps:\n  - name: w\n    wait: {until_step: nothing}\n");
    assert!(p.contains("drill.yaml:4") && p.contains("no steady-state check or earlier step"), "{p}");
    let p = problems("title: t\nsteps:\n  - name: w\n    wait: {for: 1s, until_step: x}\n");
    assert!(p.contains("exactly one of `for`, `until`, `until_step`"), "{p}");
}

#[test]
fn an_rto_objective_needs_recovery_steps() {
    let p = problems("title: t\nobjectives: {rto: 5m}\nsteps:\n  - name: a\n    shell: {command: ls}\n");
    assert!(p.contains("drill.yaml:2") && p.contains("recovery: true"), "{p}");
}

#[test]
fn a_yaml_syntax_error_names_its_line() {
    let p = problems("title: t\nsteps: [\n");
    assert!(p.contains("drill.yaml") && p.contains("line 2"), "{p}");
}

#[test]
fn variables_refer_to_each_other_and_overrides_flow_through() {
    let yaml = "title: t\nvariables:\n  url: \"host:${port}\"\n  port: 5432\n  a: \"${b}\"\n  b: \"${a}\"\nsteps:\n  - name: s\n    shell: {command: \"echo ${url}\"}\n";
    let e = parse(yaml, Path::new("d.yaml"), &[], None).unwrap_err().to_string();
    assert!(e.contains("d.yaml:5: variables.a: variables refer to each other in a cycle: a -> b -> a"), "{e}");
    let yaml = "title: t\nvariables:\n  url: \"host:${port}\"\n  port: 5432\nsteps:\n  - name: s\n    shell: {command: \"echo ${url}\"}\n";
    let rb = parse(yaml, Path::new("d.yaml"), &[("port".into(), "6000".into())], None).unwrap();
    assert_eq!(rb.variables["url"], "host:6000");
}
