//! drcheck's own records of each target's primary (issue 46): the journal of its
//! transaction horizon over time, which tables were decided when, and the rotation's
//! seed. What a run excuses as "changed on the primary since the copy's point" is
//! decided from these and the primary — never from the backup.

use super::{History, ts};
use drcheck_validators::asof::{Counters, Journal, Sample, Taken};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Samples younger than this are all kept; older ones thin to the newest of each hour.
const KEEP_ALL: Duration = Duration::from_secs(2 * 86_400);
/// Samples older than this are dropped (a backup older than that is judged by commit
/// times, or undecided).
const KEEP_AT_MOST: Duration = Duration::from_secs(400 * 86_400);

/// A `primary_horizons` row: sampled_at, xmin, system identifier, counters (JSON).
type SampleRow = (String, i64, Option<String>, Option<String>);
/// A whole `primary_horizons` row of a target: sampled_at, xmin, xmax, system
/// identifier, counters.
type FullRow = (String, i64, i64, Option<String>, Option<String>);

fn sample_of(row: SampleRow) -> Option<Sample> {
    let (at, xmin, system, counters) = row;
    Some(Sample {
        at: humantime::parse_rfc3339_weak(&at).ok()?,
        xmin: xmin as u64,
        system_identifier: system,
        source: "drcheck's journal".into(),
        counters: counters.and_then(|c| serde_json::from_str::<Counters>(&c).ok()).map(Arc::new),
    })
}

impl History {
    /// Records one sample of `target`'s primary; thins the journal.
    pub(crate) async fn record_sample(&self, target: &str, s: &Taken) -> anyhow::Result<()> {
        sqlx::query(
            "insert into primary_horizons (target, sampled_at, horizon_xmin, horizon_xmax, system_identifier, counters)
             values ($1, $2, $3, $4, $5, $6) on conflict (target, sampled_at) do nothing",
        )
        .bind(target)
        .bind(ts(s.at))
        .bind(s.xmin as i64)
        .bind(s.xmax as i64)
        .bind(s.system_identifier.clone())
        .bind(serde_json::to_string(&s.counters)?)
        .execute(&self.pool)
        .await?;
        let now = SystemTime::now();
        sqlx::query(
            "delete from primary_horizons where target = $1 and (sampled_at < $2 or (sampled_at < $3 and exists (
               select 1 from primary_horizons n where n.target = primary_horizons.target
                  and substr(n.sampled_at, 1, 13) = substr(primary_horizons.sampled_at, 1, 13)
                  and n.sampled_at > primary_horizons.sampled_at)))",
        )
        .bind(target)
        .bind(ts(now.checked_sub(KEEP_AT_MOST).unwrap_or(SystemTime::UNIX_EPOCH)))
        .bind(ts(now.checked_sub(KEEP_ALL).unwrap_or(SystemTime::UNIX_EPOCH)))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Copies `target`'s journal into `other` (a canary's own history).
    pub(crate) async fn copy_journal(&self, target: &str, other: &History) -> anyhow::Result<()> {
        let rows: Vec<FullRow> = sqlx::query_as(
            "select sampled_at, horizon_xmin, horizon_xmax, system_identifier, counters from primary_horizons where target = $1",
        )
        .bind(target)
        .fetch_all(&self.pool)
        .await?;
        let mut tx = other.pool.begin().await?;
        for (at, xmin, xmax, system, counters) in rows {
            sqlx::query(
                "insert into primary_horizons (target, sampled_at, horizon_xmin, horizon_xmax, system_identifier, counters)
                 values ($1, $2, $3, $4, $5, $6) on conflict (target, sampled_at) do nothing",
            )
            .bind(target)
            .bind(at)
            .bind(xmin)
            .bind(xmax)
            .bind(system)
            .bind(counters)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn newest_sample(&self, target: &str, until: SystemTime, counted: bool) -> anyhow::Result<Option<Sample>> {
        let sql = if counted {
            "select sampled_at, horizon_xmin, system_identifier, counters from primary_horizons
              where target = $1 and sampled_at <= $2 and counters is not null
              order by sampled_at desc limit 1"
        } else {
            "select sampled_at, horizon_xmin, system_identifier, null from primary_horizons
              where target = $1 and sampled_at <= $2 order by sampled_at desc limit 1"
        };
        let row: Option<SampleRow> =
            sqlx::query_as(sql).bind(target).bind(ts(until)).fetch_optional(&self.pool).await?;
        Ok(row.and_then(sample_of))
    }

    /// The samples a verification of `target` at the copy's point `at` uses: the newest
    /// at or before `at − grace`, the newest of those with counters, and the newest at
    /// least `settle` old.
    pub(crate) async fn journal(
        &self,
        target: &str,
        at: Option<SystemTime>,
        grace: Duration,
        settle: Duration,
    ) -> anyhow::Result<Journal> {
        let until = at.and_then(|t| t.checked_sub(grace));
        let settled = SystemTime::now().checked_sub(settle).unwrap_or(SystemTime::UNIX_EPOCH);
        Ok(Journal {
            before: match until {
                Some(u) => self.newest_sample(target, u, false).await?,
                None => None,
            },
            counted: match until {
                Some(u) => self.newest_sample(target, u, true).await?,
                None => None,
            },
            settled: self.newest_sample(target, settled, false).await?,
        })
    }

    /// Records which tables a run of `target` looked at and which it decided in full.
    pub(crate) async fn record_tables(
        &self,
        target: &str,
        tables: &[(String, bool)],
        at: SystemTime,
    ) -> anyhow::Result<()> {
        let mut tx = self.pool.begin().await?;
        for (name, decided) in tables {
            sqlx::query(
                "insert into table_proofs (target, table_name, first_seen_at, last_proven_at) values ($1, $2, $3, $4)
                 on conflict (target, table_name) do update set
                     last_proven_at = coalesce(excluded.last_proven_at, table_proofs.last_proven_at)",
            )
            .bind(target)
            .bind(name)
            .bind(ts(at))
            .bind(decided.then(|| ts(at)))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The tables of `target` first seen more than `within` before `now` and not decided
    /// in full since `now − within`: (table, when last decided).
    pub(crate) async fn tables_not_proven(
        &self,
        target: &str,
        within: Duration,
        now: SystemTime,
    ) -> anyhow::Result<Vec<(String, Option<String>)>> {
        let since = ts(now.checked_sub(within).unwrap_or(SystemTime::UNIX_EPOCH));
        Ok(sqlx::query_as(
            "select table_name, last_proven_at from table_proofs
              where target = $1 and first_seen_at < $2 and (last_proven_at is null or last_proven_at < $2)
              order by table_name",
        )
        .bind(target)
        .bind(since)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The seed of `target`'s rotation over `slices` slices: kept while its cycle lasts
    /// (`cycle_done` says every slice was compared since it was drawn), drawn anew at
    /// random otherwise — with when it was drawn.
    pub(crate) async fn rotation_seed(&self, target: &str, slices: u32) -> anyhow::Result<(u64, String)> {
        let row: Option<(i64, i64, String)> =
            sqlx::query_as("select slices, seed, drawn_at from rotation_seeds where target = $1")
                .bind(target)
                .fetch_optional(&self.pool)
                .await?;
        if let Some((n, seed, drawn)) = row
            && n == i64::from(slices)
        {
            let done: i64 = sqlx::query_scalar(
                "select count(*) from comparison_slices where target = $1 and slices = $2 and compared_at >= $3",
            )
            .bind(target)
            .bind(i64::from(slices))
            .bind(&drawn)
            .fetch_one(&self.pool)
            .await?;
            if done < i64::from(slices) {
                return Ok((seed as u64, drawn));
            }
        }
        let seed: u64 = rand::random::<u64>() >> 1;
        let drawn = ts(SystemTime::now());
        sqlx::query(
            "insert into rotation_seeds (target, slices, seed, drawn_at) values ($1, $2, $3, $4)
             on conflict (target) do update set slices = excluded.slices, seed = excluded.seed,
                 drawn_at = excluded.drawn_at",
        )
        .bind(target)
        .bind(i64::from(slices))
        .bind(seed as i64)
        .bind(&drawn)
        .execute(&self.pool)
        .await?;
        Ok((seed, drawn))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    async fn store(dir: &tempfile::TempDir) -> History {
        let url = format!("sqlite://{}", dir.path().join("h.db").display());
        History::open(&drcheck_config::Secret::new(url)).await.unwrap()
    }

    fn taken(at: SystemTime, xmin: u64, counters: bool) -> Taken {
        Taken {
            at,
            xmin,
            xmax: xmin + 5,
            system_identifier: Some("7300".into()),
            counters: Counters {
                database: "shop".into(),
                stats_reset: None,
                inserted: if counters { BTreeMap::from([(16384, 10)]) } else { BTreeMap::new() },
            },
        }
    }

    /// The horizon a backup is judged by is the newest sample taken at or before its
    /// point less the grace — never a later one.
    #[tokio::test]
    async fn a_backup_is_judged_by_the_newest_sample_before_its_point() {
        let dir = tempfile::tempdir().unwrap();
        let h = store(&dir).await;
        let now = SystemTime::now();
        let t = |mins: u64| now - Duration::from_secs(mins * 60);
        h.record_sample("orders", &taken(t(60), 100, true)).await.unwrap();
        h.record_sample("orders", &taken(t(30), 200, true)).await.unwrap();
        h.record_sample("orders", &taken(t(10), 300, true)).await.unwrap();
        h.record_sample("other", &taken(t(20), 999, true)).await.unwrap();
        // A backup at t(20) with a 5-minute grace: the sample of t(30).
        let j = h.journal("orders", Some(t(20)), Duration::from_secs(300), Duration::from_secs(120)).await.unwrap();
        assert_eq!(j.before.as_ref().map(|s| s.xmin), Some(200));
        assert_eq!(j.counted.as_ref().and_then(|s| s.counters.as_ref()).map(|c| c.inserted[&16384]), Some(10));
        assert_eq!(j.settled.as_ref().map(|s| s.xmin), Some(300), "the newest at least 2 minutes old");
        // Before every sample: nothing to judge it by.
        let j = h.journal("orders", Some(t(58)), Duration::from_secs(300), Duration::from_secs(120)).await.unwrap();
        assert!(j.before.is_none() && j.counted.is_none());
        let j = h.journal("orders", None, Duration::ZERO, Duration::ZERO).await.unwrap();
        assert!(j.before.is_none(), "no point, no sample");
    }

    #[tokio::test]
    async fn tables_never_decided_within_prove_within_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let h = store(&dir).await;
        let now = SystemTime::now();
        let day = Duration::from_secs(86_400);
        h.record_tables("orders", &[("public.a".into(), true), ("public.b".into(), false)], now - day * 40)
            .await
            .unwrap();
        h.record_tables("orders", &[("public.a".into(), false), ("public.b".into(), false)], now - day).await.unwrap();
        h.record_tables("orders", &[("public.c".into(), false)], now).await.unwrap();
        let not = h.tables_not_proven("orders", day * 30, now).await.unwrap();
        let names: Vec<&str> = not.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["public.a", "public.b"], "public.c is new: not yet due");
        assert!(not[0].1.is_some() && not[1].1.is_none());
        h.record_tables("orders", &[("public.a".into(), true)], now).await.unwrap();
        assert_eq!(h.tables_not_proven("orders", day * 30, now).await.unwrap().len(), 1);
    }

    /// A rotation's seed is the cycle's: kept until every slice was compared, then drawn
    /// anew (issue 46: a backup cannot choose which slice its rows fall in).
    #[tokio::test]
    async fn a_rotation_draws_a_new_seed_each_cycle() {
        let dir = tempfile::tempdir().unwrap();
        let h = store(&dir).await;
        let (seed, drawn) = h.rotation_seed("orders", 2).await.unwrap();
        assert_eq!(h.rotation_seed("orders", 2).await.unwrap(), (seed, drawn.clone()), "kept within the cycle");
        let later = humantime::parse_rfc3339_weak(&drawn).unwrap() + Duration::from_secs(1);
        h.slice_compared("orders", 2, 0, later).await.unwrap();
        assert_eq!(h.rotation_seed("orders", 2).await.unwrap().0, seed, "one slice of two: still the cycle");
        h.slice_compared("orders", 2, 1, later).await.unwrap();
        let (next, _) = h.rotation_seed("orders", 2).await.unwrap();
        assert_ne!(next, seed, "a new cycle, a new seed");
    }
}
