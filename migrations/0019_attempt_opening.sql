-- A queued attempt's opening in two statements instead of three (BEGIN, then this), as a request's is
-- (ledger_open_request, migration 0013): the tenant and the attempt's statement_timeout set, then the
-- attempt's one read (queue/attempts.py) under the row-level security the tenant just set: the queue row
-- (no row at all when it is gone), the execution with the starter's claims and client row and the
-- tenant's trigger version, and the action at the execution's version. The jsonb values come as their
-- text, which the worker decodes with json's scanner (psycopg's jsonb loader costs it more per value).
-- SECURITY INVOKER: it reads as the caller, under the same policies as the statement it replaces.
CREATE FUNCTION ledger_open_attempt(p_tenant uuid, p_execution uuid, p_timeout text)
  RETURNS TABLE (
    q_lease_token uuid, q_cancel_requested boolean,
    tenant_id uuid, id uuid, action_id uuid, action_version integer, status text, parent_execution_id uuid,
    root_execution_id uuid, call_sequence integer, depth integer, attempts integer, started boolean,
    started_by_execution_id uuid, client_id uuid, event text, input text, session_id uuid,
    created_at timestamptz, parent_attempt integer, rolled_back boolean, mcp_server_id uuid, trigger_id uuid,
    trigger_depth integer, client_claims text, planned_action_id uuid, client_row_id uuid, client_name text,
    client_enabled boolean, client_policies text, triggers_version bigint,
    act_tenant_id uuid, act_id uuid, act_name text, act_kind text, act_status text, act_pending text,
    act_latest_version integer, act_created_at timestamptz, act_updated_at timestamptz,
    v_version integer, v_definition text, v_enabled boolean, v_created_at timestamptz)
  LANGUAGE plpgsql VOLATILE SECURITY INVOKER AS $$
#variable_conflict use_column
BEGIN
  PERFORM set_config('ledger.tenant_id', p_tenant::text, true), set_config('statement_timeout', p_timeout, true);
  RETURN QUERY
    SELECT q.lease_token, q.cancel_requested,
           e.tenant_id, e.id, e.action_id, e.action_version, e.status, e.parent_execution_id,
           e.root_execution_id, e.call_sequence, e.depth, e.attempts, e.started,
           e.started_by_execution_id, e.client_id, e.event::text, e.input::text, e.session_id,
           e.created_at, e.parent_attempt, e.rolled_back, e.mcp_server_id, e.trigger_id,
           e.trigger_depth, e.client_claims::text, e.planned_action_id, c.id, c.name,
           c.enabled, c.policies::text,
           (SELECT tv.version FROM trigger_versions tv WHERE tv.tenant_id = ledger_current_tenant()),
           a.tenant_id, a.id, a.name, a.kind, a.status, a.pending,
           a.latest_version, a.created_at, a.updated_at,
           v.version, v.definition::text, v.enabled, v.created_at
      FROM execution_queue q
      LEFT JOIN executions e ON e.tenant_id = q.tenant_id AND e.id = q.execution_id
      LEFT JOIN clients c ON c.tenant_id = e.tenant_id AND c.id = e.client_id
      LEFT JOIN actions a ON a.tenant_id = e.tenant_id AND a.id = e.action_id
      LEFT JOIN action_versions v ON v.tenant_id = a.tenant_id AND v.action_id = a.id
                                 AND v.version = e.action_version
     WHERE q.tenant_id = p_tenant AND q.execution_id = p_execution;
END
$$;
REVOKE ALL ON FUNCTION ledger_open_attempt(uuid, uuid, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_open_attempt(uuid, uuid, text) TO ledger_app;
