-- pgbench script for pgbench_test.sh: each client sets its own TimeZone once
-- (Etc/GMT-<client_id>, via set_config so that the zone can be a parameter under
-- -M prepared/extended) and checks it in every later transaction; a zone that
-- leaked in from another client or vanished makes the cast below fail, which
-- aborts the client (pgbench then exits non-zero). Needs -D tzset=0.
\if :tzset = 0
SELECT set_config('TimeZone', 'Etc/GMT-' || :client_id, false);
\set tzset 1
\endif
SELECT (current_setting('TimeZone') = 'Etc/GMT-' || :client_id)::int AS tzok, current_setting('TimeZone') AS tz \gset
\if :tzok = 0
SELECT ('timezone check failed: client ' || :client_id || ' sees ' || :tz)::int;
\endif
