-- Every call writes every index of `executions` for each of its rows (a money call: two rows), so an index
-- stays only while some query reads through it. `executions_listing` (tenant, created_at, id) over all
-- rows no longer serves one: the listing of top-level executions reads `executions_top_level` (the same
-- columns, for rows without a parent), a parent's calls read `executions_children_per_attempt`, a
-- trigger's runs `executions_by_trigger`, a cursor and every lookup by id the primary key
-- (tests/test_executions_listing.py requires an index path for each query as the code builds it).
-- Without it a call's two rows write four index entries instead of six.
DROP INDEX executions_listing;
