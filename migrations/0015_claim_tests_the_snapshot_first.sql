-- The claim tests a running attempt's lease in its statement's own snapshot before it calls
-- ledger_lease_held (a fresh snapshot, ~11 µs a call), as migration 0014 meant it to: the two are ANDed
-- filters of one scan, which the planner orders by estimated cost, and at the default cost of a
-- function (100 × cpu_operator_cost = 0.25) the call went first whenever the snapshot's subquery was
-- costed above it: an index scan of execution_leases, ~8 (EXPLAIN ANALYZE: the subquery "never
-- executed", the call made for every running attempt's row). Only with the leases table estimated nearly
-- empty (a sequential scan costed near 0) did the subquery go first. At this cost (25) it goes first for
-- any size of that table. The function is used by the claim alone.
ALTER FUNCTION ledger_lease_held(uuid) COST 10000;
