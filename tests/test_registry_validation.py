"""Validation on write: every rejection names its path; a definition with many problems reports them all."""

import uuid

from registry_helpers import create, create_error, lifecycle, problems, tool_input


def paths(error: dict) -> list[str]:
    return [p["path"] for p in problems(error)]


def with_schema(schema: dict, **extra) -> dict:
    doc = tool_input(**extra)
    doc["tool"]["inputSchema"] = schema
    return doc


def test_an_invalid_json_schema_is_rejected(api):
    error = create_error(api, with_schema({"type": "object", "properties": {"x": {"type": "nonsense"}}}))
    assert "tool.inputSchema" in paths(error)


def test_an_input_schema_whose_root_is_not_an_object_is_rejected(api):
    error = create_error(api, with_schema({"type": "string"}))
    assert any("root must be an object" in p["message"] for p in problems(error))


def test_a_top_level_property_that_is_not_an_identifier_is_rejected(api):
    error = create_error(api, with_schema({"type": "object", "properties": {"account-id": {"type": "string"}}}))
    assert paths(error) == ["tool.inputSchema.properties.account-id"]


def test_a_top_level_property_that_is_a_keyword_is_rejected(api):
    error = create_error(api, with_schema({"type": "object", "properties": {"from": {"type": "string"}}}))
    assert "keyword" in problems(error)[0]["message"]


def test_soft_keywords_are_allowed_as_top_level_names(api):
    create(api, with_schema({"type": "object", "properties": {"match": {"type": "string"}, "type": {"type": "string"}}}))


def test_a_nested_property_named_from_is_fine(api):
    create(api, with_schema({"type": "object", "properties": {
        "transfer": {"type": "object", "properties": {"from": {"type": "string"}}}}}))


def test_a_remote_ref_is_never_fetched(api):
    error = create_error(api, with_schema({"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}}))
    assert "tool.inputSchema" in paths(error)


def test_a_bad_name_is_rejected(api):
    assert set(paths(create_error(api, tool_input("Bad-Name")))) == {"name", "tool.name"}


def test_kind_tool_needs_a_tool_block(api):
    doc = tool_input()
    del doc["tool"]
    assert "tool" in paths(create_error(api, doc))


def test_an_unknown_kind_is_rejected(api):
    doc = tool_input()
    doc["kind"] = "robot"
    assert "kind" in paths(create_error(api, doc))


def test_config_must_be_exactly_runtime_and_src(api):
    doc = tool_input()
    doc["config"] = {"runtime": "python", "src": "def run(e):\n  return 1\n", "extra": 1}
    assert set(paths(create_error(api, doc))) == {"config", "config.runtime"}


def test_src_over_64_kib_is_rejected(api):
    doc = tool_input(src="def run(event):\n    return 1\n" + "#" * (64 * 1024) + "\n")
    assert "64 KiB" in problems(create_error(api, doc))[0]["message"]


def test_a_program_that_does_not_compile_reports_line_and_column(api):
    error = create_error(api, tool_input(src="def run(event):\n    return (1 +\n"))
    problem = problems(error)[0]
    assert problem["path"] == "config.src" and "line" in problem["message"]


def test_a_program_without_run_is_rejected(api):
    assert "config.src" in paths(create_error(api, tool_input(src="def walk(event):\n    return 1\n")))


def test_an_offload_other_than_auto_or_never_is_rejected(api):
    doc = tool_input()
    doc["tool"]["output"] = {"offload": "SOMETIMES"}
    assert paths(create_error(api, doc)) == ["tool.output.offload"]


def test_never_offload_is_accepted(api):
    doc = tool_input()
    doc["tool"]["output"] = {"offload": "NEVER"}
    assert create(api, doc)["tool"]["output"] == {"offload": "NEVER"}


def test_a_policy_with_a_bad_pattern_and_a_bad_assertion_reports_both(api):
    doc = tool_input(policies=[
        {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial..Account"]},
        {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.*"], "assertion": "1 +"},
    ])
    found = paths(create_error(api, doc))
    assert any(p.startswith("policies[0]") for p in found) and any(p.startswith("policies[1]") for p in found)


def test_a_reference_to_a_missing_tool_is_rejected(api):
    assert paths(create_error(api, tool_input("caller", tools=[{"name": "nope"}]))) == ["tools[0].name"]


def test_a_duplicate_reference_is_rejected(api):
    create(api, tool_input("echo"))
    assert paths(create_error(api, tool_input("caller", tools=[{"name": "echo"}, {"name": "echo"}]))) == ["tools[1]"]


def test_a_reference_to_a_disabled_tool_is_rejected(api):
    echo = create(api, tool_input("echo"))
    lifecycle(api, "disableAction", echo["actionId"])
    assert "disabled" in problems(create_error(api, tool_input("caller", tools=[{"name": "echo"}])))[0]["message"]


def test_a_reference_to_a_deleted_tool_is_rejected(api):
    echo = create(api, tool_input("echo"))
    lifecycle(api, "deleteAction", echo["actionId"])
    assert create_error(api, tool_input("caller", tools=[{"name": "echo"}]))["extensions"]["code"] == "action_definition_invalid"


def test_a_reference_at_a_version_the_tool_lacks_is_rejected(api):
    create(api, tool_input("echo"))
    assert paths(create_error(api, tool_input("caller", tools=[{"name": "echo", "version": 7}]))) == ["tools[0].version"]


def test_two_references_with_the_same_tool_name_are_rejected(api):
    first = tool_input("echo_a")
    first["tool"]["name"] = "echo"
    second = tool_input("echo_b")
    second["tool"]["name"] = "echo"
    create(api, first)
    create(api, second)
    error = create_error(api, tool_input("caller", tools=[{"name": "echo_a"}, {"name": "echo_b"}]))
    assert "unique" in problems(error)[0]["message"]


def test_references_that_lead_back_to_the_action_are_rejected(api):
    from registry_helpers import UPDATE

    a = create(api, tool_input("alpha"))
    create(api, tool_input("beta", src='def run(event):\n    return tools.alpha({"text": "x"})\n',
                           tools=[{"name": "alpha"}]))
    cyclic = tool_input("alpha", src='def run(event):\n    return tools.beta({"text": "x"})\n', tools=[{"name": "beta"}])
    error = api.error(UPDATE, {"id": a["actionId"], "input": cyclic})
    assert "cycle" in problems(error)[0]["message"]


def test_only_tool_kinds_take_a_tools_list(api):
    create(api, tool_input("echo"))
    doc = {"name": "my_cel", "kind": "cel", "tools": [{"name": "echo"}]}
    assert paths(create_error(api, doc)) == ["tools"]


def test_a_tool_block_on_a_kind_without_one_is_reported_with_the_kind_problem(api):
    doc = tool_input()
    doc["kind"] = "robot"
    assert set(paths(create_error(api, doc))) >= {"kind", "tool"}


def test_a_graphql_kind_action_takes_the_native_schemas(api):
    action = create(api, {"name": "my_graphql", "kind": "graphql", "policies": [
        {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.Account.*"]}]})
    assert action["config"] == {"version": 1}
    assert action["tool"]["inputSchema"]["required"] == ["document"]


def test_a_native_kind_config_other_than_version_one_is_rejected(api):
    assert paths(create_error(api, {"name": "my_cel", "kind": "cel", "config": {"version": 2}})) == ["config"]


def test_an_undeclared_tool_in_the_program_is_rejected(api):
    error = create_error(api, tool_input(src='def run(event):\n    return tools.missing({})\n'))
    assert "not declared" in problems(error)[0]["message"]


def test_a_literal_document_is_validated_against_the_schema(api):
    src = 'def run(event):\n    return graphql("{ financial { nope } }")\n'
    problem = problems(create_error(api, tool_input(src=src)))[0]
    assert problem["path"] == "config.src" and "nope" in problem["message"] and "line 2" in problem["message"]


def test_a_document_through_the_programs_own_function_names_the_route(api):
    src = ('def fetch(doc):\n    return graphql(doc)\n\n'
           'def run(event):\n    return fetch("{ financial { nope } }")\n')
    message = problems(create_error(api, tool_input(src=src)))[0]["message"]
    assert "fetch" in message and "line 5" in message


def test_a_runtime_built_document_is_accepted(api):
    src = ('def run(event):\n    field = "balance" if event["data"]["text"] else "currency"\n'
           '    return graphql("query($id: UUID!) { financial { account(id: $id) { " + field + " } } }",'
           ' variables={"id": event["data"]["text"]})\n')
    create(api, tool_input(src=src))


def test_ten_problems_are_all_reported(api):
    doc = {
        "name": "Bad Name", "kind": "tool",
        "config": {"runtime": "lua", "src": ""},
        "tool": {"name": "Bad Tool", "description": "", "inputSchema": {"type": "object", "properties": {
            "class": {}, "1st": {}}}, "output": {"offload": "MAYBE"}, "responseTimeout": 999_999},
        "policies": [{"effect": "ALLOW", "actions": ["SELECT"], "resources": [""]}],
        "tools": [{"name": "missing"}],
        "execution": {"maxAttempts": 0},
    }
    assert len(problems(create_error(api, doc))) >= 10


def test_nothing_is_written_when_a_definition_is_rejected(api):
    create_error(api, tool_input("echo", src="def run(:\n"))
    listed = api.gql("{ actions { actions(where: {native: false}) { name } } }")["actions"]["actions"]
    assert listed == []
    create(api, tool_input("echo"))
