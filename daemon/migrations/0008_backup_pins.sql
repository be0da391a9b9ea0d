-- Issue 37: each proven backup's identity as proven — its objects' keys, sizes, ETags
-- and version ids, and the backup's time (JSON) — compared with every later listing.
alter table backup_proofs add column pin text;
