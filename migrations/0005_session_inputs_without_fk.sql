-- A session is found or created in its own short transaction, committed before the call's request
-- transaction records its SessionInput. At REPEATABLE READ that request's snapshot predates the
-- session row, so a foreign key check against it could fail; the session id is checked by the service.
ALTER TABLE session_inputs DROP CONSTRAINT session_inputs_tenant_id_session_id_fkey;
