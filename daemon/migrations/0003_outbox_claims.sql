-- Any number of dispatchers on one history: a due row is claimed (by whom, until when)
-- before it is delivered, so two dispatchers never send the same row at once; a claim
-- left by a dispatcher that died expires and the row is delivered again (at least once).
alter table alert_outbox add column claimed_by text;
alter table alert_outbox add column claim_expires_at text;
create index alert_outbox_key on alert_outbox (sink, target, alertname, created_at);

-- What a firing alert says and when it was last queued, so Alertmanager hears it again
-- before its endsAt for as long as it fires (the stale alert included).
alter table alert_state add column payload text;
alter table alert_state add column last_sent_at text;

-- Whether an alert's firing ever reached a sink (its resolution is sent only then).
create index alerts_delivered_key on alerts_delivered (sink, dedup_key);
