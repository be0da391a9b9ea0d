//! A physical backup holds a whole cluster: the validators that apply to any database
//! run on every one of them, and their findings are merged into one finding per
//! validator, so coverage is the cluster's, not one database's.

use crate::finding::{COVERED, Finding, Status, some_of};

/// Validators whose configuration names tables of one database (`as_of` columns, custom
/// SQL): they run on the target's own database only.
pub const ONE_DATABASE: &[&str] = &["freshness", "custom", "point_in_time"];

/// Measurements that add up over a cluster's databases (besides `covered_*`).
const SUMMED: &[&str] = &[
    "seconds",
    "rows_compared",
    "inconclusive",
    "rows_changed_since",
    "rows_deleted_since",
    crate::finding::UNDECIDED_ROWS,
    crate::finding::UNDECIDED_TABLES,
];

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
            merged.refused_by_primary = status == Status::Error
                && entries.iter().any(|(_, f)| f.status == Status::Error && f.refused_by_primary);
            for (db, f) in &entries {
                merged.inconclusive.extend(f.inconclusive.iter().map(|i| format!("{db}: {i}")));
                let named = f.per_table.iter().map(|(t, ok)| (format!("{db}: {t}"), *ok));
                merged.per_table = merged.per_table.iter().cloned().chain(named).collect();
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

/// The finding that says which databases of a physical backup were validated.
pub const DATABASES: &str = "databases";

/// OIDs the server may have handed out before a checkpoint records them (`VAR_OID_PREFETCH`):
/// a database with an OID this close below the copy's next one may be newer than its point.
pub const OID_PREFETCH: i64 = 8192;

/// A restored cluster's databases (templates left out) and its next OID.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    pub databases: Vec<ClusterDb>,
    pub next_oid: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct ClusterDb {
    pub name: String,
    /// `datallowconn`, and not left invalid by an interrupted `DROP DATABASE`.
    pub connectable: bool,
}

/// `databases`: every database of a physical backup is there and was validated. The
/// expected ones are the cluster's own (its `pg_database`) and, with a primary, the
/// primary's: one the primary has but the copy lacks fails — unless its OID is at or
/// past the copy's next one (made after the copy's point: counted, never failed), or
/// within the OIDs a checkpoint may have handed out ahead (inconclusive); one the copy
/// lists but will not open (`datallowconn` off, or a connection refused) fails, unless
/// the primary does not open it either.
pub fn coverage(
    cluster: &Cluster,
    primary: Option<&[(String, i64)]>,
    validated: &[String],
    refused: &[(String, String)],
) -> Finding {
    let mut failed = Vec::new();
    let mut since = Vec::new();
    let mut unsure = Vec::new();
    let mut notes = Vec::new();
    let in_copy = |n: &str| cluster.databases.iter().any(|d| d.name == n);
    if let Some(primary) = primary {
        for (name, oid) in primary {
            if in_copy(name) {
                continue;
            }
            match cluster.next_oid {
                Some(next) if *oid >= next => since.push(name.clone()),
                Some(next) if *oid >= next - OID_PREFETCH => unsure.push(name.clone()),
                _ => failed.push(format!("database {name:?} is on the primary but not in the backup")),
            }
        }
    }
    for d in cluster.databases.iter().filter(|d| !d.connectable) {
        let on_primary = primary.map(|p| p.iter().any(|(n, _)| *n == d.name));
        match on_primary {
            Some(false) => notes.push(format!("database {:?} takes no connections here nor on the primary", d.name)),
            _ => failed.push(format!("database {:?} is in the backup but takes no connections", d.name)),
        }
    }
    for (name, why) in refused {
        failed.push(format!("database {name:?} is in the backup but cannot be opened: {why}"));
    }
    let mut detail = if failed.is_empty() {
        format!("{} databases validated: {}", validated.len(), some_of(validated, 20))
    } else {
        format!("{} of the backup's databases not validated: {}", failed.len(), some_of(&failed, 20))
    };
    if !since.is_empty() {
        detail.push_str(&format!(
            "; made on the primary after the copy's point (newer OIDs than the copy had given): {}",
            some_of(&since, 20)
        ));
    }
    if !notes.is_empty() {
        detail.push_str(&format!("; {}", some_of(&notes, 20)));
    }
    let status = if !failed.is_empty() { Status::Failed } else { Status::Passed };
    let mut f = Finding::new(DATABASES, status, detail).covered("databases", validated.len() as u64);
    if !unsure.is_empty() {
        f = f.inconclusive(
            unsure
                .iter()
                .map(|n| {
                    format!(
                        "database {n:?}: on the primary, not in the copy, and made about the copy's point (its OID \
                         is among those a checkpoint hands out ahead); the next backup tells"
                    )
                })
                .collect(),
        );
    }
    f
}

#[cfg(test)]
mod coverage_tests {
    use super::*;

    fn cluster(dbs: &[(&str, bool)], next_oid: i64) -> Cluster {
        Cluster {
            databases: dbs.iter().map(|(n, c)| ClusterDb { name: n.to_string(), connectable: *c }).collect(),
            next_oid: Some(next_oid),
        }
    }

    #[test]
    fn a_database_the_backup_lost_fails_and_a_newer_one_is_counted() {
        let copy = cluster(&[("bank", true)], 40_000);
        let validated = vec!["bank".to_string()];
        // Made well before the copy's point, missing from it: the backup's.
        let f = coverage(&copy, Some(&[("bank".into(), 16384), ("billing".into(), 16390)]), &validated, &[]);
        assert_eq!(f.status, Status::Failed, "{f:?}");
        assert!(f.detail.contains("\"billing\" is on the primary but not in the backup"), "{}", f.detail);
        // Made after it (an OID the copy never gave): counted, passed.
        let f = coverage(&copy, Some(&[("bank".into(), 16384), ("new".into(), 40_001)]), &validated, &[]);
        assert_eq!(f.status, Status::Passed, "{f:?}");
        assert!(f.detail.contains("after the copy's point") && f.detail.contains("new"), "{}", f.detail);
        // About the point: inconclusive, never passed over silently.
        let f = coverage(&copy, Some(&[("bank".into(), 16384), ("edge".into(), 35_000)]), &validated, &[]);
        assert_eq!(f.status, Status::Passed);
        assert_eq!(f.inconclusive.len(), 1, "{f:?}");
    }

    #[test]
    fn a_database_the_backup_will_not_open_fails_unless_the_primary_will_not_either() {
        let copy = cluster(&[("bank", true), ("billing", false), ("archive", false)], 40_000);
        let validated = vec!["bank".to_string()];
        let primary = [("bank".to_string(), 16384), ("billing".to_string(), 16385)];
        let f = coverage(&copy, Some(&primary), &validated, &[]);
        assert_eq!(f.status, Status::Failed);
        assert!(f.detail.contains("\"billing\" is in the backup but takes no connections"), "{}", f.detail);
        assert!(f.detail.contains("\"archive\" takes no connections here nor on the primary"), "{}", f.detail);
        // Without a primary, every database the copy lists must open.
        let f = coverage(&cluster(&[("bank", true), ("archive", false)], 40_000), None, &validated, &[]);
        assert_eq!(f.status, Status::Failed, "{f:?}");
        let refused = [("ledger".to_string(), "database directory missing".to_string())];
        let f = coverage(&cluster(&[("bank", true), ("ledger", true)], 40_000), None, &validated, &refused);
        assert_eq!(f.status, Status::Failed);
        assert!(f.detail.contains("\"ledger\" is in the backup but cannot be opened"), "{}", f.detail);
        let f = coverage(&cluster(&[("bank", true)], 40_000), None, &validated, &[]);
        assert_eq!(f.status, Status::Passed);
        assert_eq!(f.measurements["covered_databases"], 1.0);
    }
}
