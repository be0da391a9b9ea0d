//! A physical backup holds a whole cluster: the validators that apply to any database
//! run on every one of them, and their findings are merged into one finding per
//! validator, so coverage is the cluster's, not one database's.

use crate::{COVERED, Finding, Status};

/// Validators whose configuration names tables of one database (`as_of` columns, custom
/// SQL): they run on the target's own database only.
pub const ONE_DATABASE: &[&str] = &["freshness", "custom", "point_in_time"];

/// Measurements that add up over a cluster's databases (besides `covered_*`).
const SUMMED: &[&str] = &["seconds", "rows_compared", "inconclusive", "rows_changed_since", "rows_deleted_since"];

/// Whether validator (or finding) `name` runs on every database of a cluster.
pub fn runs_everywhere(name: &str) -> bool {
    !ONE_DATABASE.iter().any(|v| name == *v || name.starts_with(&format!("{v}:")) || name.starts_with("check: "))
}

/// One finding per validator from each database's findings: failed if any database
/// failed, else error if any errored, else passed if any passed, else skipped. The
/// detail says each database's verdict; `covered_*` are summed and `covered_databases`
/// counts the databases that passed.
pub fn merge(per_database: Vec<(String, Vec<Finding>)>) -> Vec<Finding> {
    if per_database.len() == 1 {
        return per_database.into_iter().next().map(|(_, f)| f).unwrap_or_default();
    }
    let mut order: Vec<String> = Vec::new();
    for (_, findings) in &per_database {
        for f in findings {
            if !order.contains(&f.name) {
                order.push(f.name.clone());
            }
        }
    }
    order
        .into_iter()
        .map(|name| {
            let entries: Vec<(&String, &Finding)> = per_database
                .iter()
                .flat_map(|(db, fs)| fs.iter().filter(|f| f.name == name).map(move |f| (db, f)))
                .collect();
            let any = |s: Status| entries.iter().any(|(_, f)| f.status == s);
            let status = if any(Status::Failed) {
                Status::Failed
            } else if any(Status::Error) {
                Status::Error
            } else if any(Status::Passed) {
                Status::Passed
            } else {
                Status::Skipped
            };
            let detail: Vec<String> =
                entries.iter().map(|(db, f)| format!("{db}: {} {}", f.status.as_str(), f.detail)).collect();
            let mut merged = Finding::new(&name, status, detail.join("; "));
            for (db, f) in &entries {
                merged.inconclusive.extend(f.inconclusive.iter().map(|i| format!("{db}: {i}")));
            }
            for (_, f) in &entries {
                for (k, v) in &f.measurements {
                    if k.starts_with(COVERED) || SUMMED.contains(&k.as_str()) {
                        *merged.measurements.entry(k.clone()).or_insert(0.0) += v;
                    } else {
                        merged.measurements.entry(k.clone()).or_insert(*v);
                    }
                }
            }
            let passed = entries.iter().filter(|(_, f)| f.status == Status::Passed).count();
            merged.covered("databases", passed as u64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_verdict_wins_and_coverage_adds_up() {
        let per = vec![
            ("postgres".to_string(), vec![Finding::new("full_read", Status::Skipped, "covered nothing")]),
            (
                "orders".to_string(),
                vec![Finding::new("full_read", Status::Passed, "all 3 tables read").covered("tables", 3)],
            ),
            (
                "billing".to_string(),
                vec![Finding::new("full_read", Status::Passed, "all 2 tables read").covered("tables", 2)],
            ),
        ];
        let m = merge(per);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].status, Status::Passed);
        assert_eq!(m[0].measurements["covered_tables"], 5.0);
        assert_eq!(m[0].measurements["covered_databases"], 2.0);
        assert!(
            m[0].detail.contains("postgres: skipped") && m[0].detail.contains("billing: passed"),
            "{}",
            m[0].detail
        );

        let per = vec![
            ("a".to_string(), vec![Finding::new("amcheck", Status::Passed, "ok").covered("relations", 9)]),
            ("b".to_string(), vec![Finding::new("amcheck", Status::Failed, "corruption in b")]),
        ];
        assert_eq!(merge(per)[0].status, Status::Failed);
        assert!(!runs_everywhere("custom") && !runs_everywhere("check: no orphans") && runs_everywhere("schema"));
    }
}
