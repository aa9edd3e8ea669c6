"""deploy/lambda/template.yaml read as data (cfn-lint checks its syntax in test_templates.py):
the functions set only settings the gateway knows and no secret (an agent's own secret only as
a reference into the settings secret, read through ``env:``), the API streams through the
Lambda Web Adapter and hands runs to the worker, the worker takes the adapter's events, fails
over to a queue and is swept on a schedule, the tables come from the one DynamoDB template,
every reference resolves, and each role may do only its function's part."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from a2a_gateway.observability.logs import looks_secret
from a2a_gateway.settings import GatewaySettings, resolve_handler_settings
from a2a_gateway.tasks.dispatch import SWEEP_EVENT, parse_event
from handlers.hermes import HermesSettings
from tests.deploy.dockerfile import ROOT, stages
from tests.deploy.gateway_env import known_settings

DEPLOY = ROOT / "deploy"
TEMPLATE = DEPLOY / "lambda" / "template.yaml"
FUNCTIONS = ("ApiFunction", "WorkerFunction")
GENERATED = {"ApiFunctionUrl"}  # SAM makes it from FunctionUrlConfig
SUBSTITUTION = re.compile(r"\$\{([^}!]+)\}")
AGENT_SECRET = "AGENT_API_KEY"


def template() -> dict[str, Any]:
    return yaml.safe_load(TEMPLATE.read_text())


def dynamodb_template() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "dynamodb" / "template.yaml").read_text())


def resource(name: str) -> dict[str, Any]:
    return template()["Resources"][name]


def function_env(name: str) -> dict[str, Any]:
    """A function's variables: the Globals' with its own on top (as SAM merges them)."""
    shared = template()["Globals"]["Function"]["Environment"]["Variables"]
    return {**shared, **resource(name)["Properties"]["Environment"]["Variables"]}


def resolved(value: Any) -> Any:
    """A value as a string the gateway would be given: a resource's name for its Ref, a
    parameter's default (or ``<Name>``), ``<Resource.Attribute>`` for a GetAtt, the first
    branch of an If."""
    if not isinstance(value, dict):
        return value
    ((kind, argument),) = value.items()
    if kind == "Ref":
        return str(template()["Parameters"].get(argument, {}).get("Default") or f"<{argument}>")
    if kind == "Fn::GetAtt":
        return f"<{'.'.join(argument)}>"
    if kind == "Fn::If":
        return resolved(argument[1])
    if kind == "Fn::Sub":
        return SUBSTITUTION.sub(lambda m: f"<{m.group(1)}>", argument)
    raise AssertionError(f"no rule for {kind}")


def references(node: Any) -> list[tuple[str, str]]:
    """Every (Ref target, '') and (GetAtt resource, attribute) in ``node``."""
    if isinstance(node, list):
        return [r for item in node for r in references(item)]
    if not isinstance(node, dict):
        return []
    if set(node) == {"Ref"}:
        return [(node["Ref"], "")]
    if set(node) == {"Fn::GetAtt"}:
        return [(node["Fn::GetAtt"][0], node["Fn::GetAtt"][1])]
    if set(node) == {"Fn::Sub"} and isinstance(node["Fn::Sub"], str):
        return [(name, attribute) for name, _, attribute in
                (m.partition(".") for m in SUBSTITUTION.findall(node["Fn::Sub"]))]
    return [r for value in node.values() for r in references(value)]


def statements(role: str) -> list[dict[str, Any]]:
    return [s for policy in resource(role)["Properties"]["Policies"]
            for s in policy["PolicyDocument"]["Statement"]]


def test_the_template_is_linted():
    from tests.deploy.test_templates import TEMPLATES

    assert TEMPLATE in TEMPLATES


@pytest.mark.parametrize("function", FUNCTIONS)
def test_each_function_sets_only_settings_the_gateway_accepts(function: str):
    env = {name: resolved(value) for name, value in function_env(function).items()}
    assert len(known_settings(f"lambda {function}", env)) >= 5


def test_the_settings_check_refuses_unknown_names_and_bad_values():
    with pytest.raises(AssertionError, match="A2A_GATEWAY_NO_SUCH is no gateway setting"):
        known_settings("here", {"A2A_GATEWAY_NO_SUCH": "1"})
    with pytest.raises(pytest.fail.Exception, match=r"(?s)here: .*\nport\n"):
        known_settings("here", {"A2A_GATEWAY_PORT": "eighty"})


def test_no_secret_is_in_the_environment_only_the_arn_of_the_settings_secret():
    parameters = template()["Parameters"]
    for function in FUNCTIONS:
        for name, value in function_env(function).items():
            if name == AGENT_SECRET:  # a reference CloudFormation resolves: the next test
                continue
            if looks_secret(name):
                assert name == "A2A_GATEWAY_SECRETS_MANAGER_ID", f"{function}: {name}"
                assert set(value) == {"Ref"}, f"{function}: {name} is not a parameter"
                assert parameters[value["Ref"]]["AllowedPattern"].startswith(
                    "arn:aws[a-z-]*:secretsmanager:"
                )
            assert not (isinstance(value, str) and looks_secret(value)), f"{function}: {name}"
    for role in ("ApiRole", "WorkerRole"):
        (read,) = [s for s in statements(role) if s["Action"] == "secretsmanager:GetSecretValue"]
        assert read["Resource"] == {"Ref": "GatewaySecretArn"}


def test_an_agent_secret_comes_from_the_settings_secret_when_a_key_of_it_is_named(monkeypatch):
    parameters = template()["Parameters"]
    key = parameters["AgentSecretKey"]
    assert key["Default"] == ""
    assert re.fullmatch(key["AllowedPattern"], "HERMES_API_KEY")
    assert not re.fullmatch(key["AllowedPattern"], "a:b")  # a dynamic reference's json-key
    assert template()["Conditions"]["HasAgentSecret"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "AgentSecretKey"}, ""]}]}
    for function in FUNCTIONS:
        condition, value, otherwise = function_env(function)[AGENT_SECRET]["Fn::If"]
        assert condition == "HasAgentSecret" and otherwise == {"Ref": "AWS::NoValue"}, function
        assert value == {"Fn::Sub": "{{resolve:secretsmanager:${GatewaySecretArn}"
                                    ":SecretString:${AgentSecretKey}}}"}, function
    # an endpoint names the variable as env:AGENT_API_KEY, as the template and the README say
    assert f"env:{AGENT_SECRET}" in key["Description"]
    readme = (DEPLOY / "README.md").read_text()
    assert f"env:{AGENT_SECRET}" in readme and "AgentSecretKey=" in readme
    monkeypatch.setenv(AGENT_SECRET, "key-from-the-settings-secret")
    settings = resolve_handler_settings(
        HermesSettings, "handlers.hermes:HermesAgentHandler",
        {"hermes_api_key": f"env:{AGENT_SECRET}"}, GatewaySettings())
    assert settings.hermes_api_key.get_secret_value() == "key-from-the-settings-secret"


def test_the_api_streams_through_the_adapter_and_dispatches_to_the_worker():
    api = resource("ApiFunction")["Properties"]
    env = function_env("ApiFunction")
    image = stages()[-1].env()
    assert api["PackageType"] == "Image" and api["ImageUri"] == {"Ref": "ImageUri"}
    assert api["FunctionUrlConfig"]["InvokeMode"] == "RESPONSE_STREAM"
    assert env["AWS_LWA_INVOKE_MODE"] == "response_stream"
    assert env["AWS_LWA_PORT"] == image["AWS_LWA_PORT"] == image["A2A_GATEWAY_PORT"]
    assert env["AWS_LWA_READINESS_CHECK_PATH"] == "/healthz"
    assert env["A2A_GATEWAY_DISPATCH"] == "lambda"
    assert env["A2A_GATEWAY_DISPATCH_FUNCTION"] == {"Ref": "WorkerFunction"}
    assert env["A2A_GATEWAY_STORE"] == {"Fn::GetAtt": ["Store", "Outputs.StoreUrl"]}
    permission = resource("ApiFunctionUrlInvokePermission")["Properties"]
    assert (
        permission["FunctionName"] == {"Ref": "ApiFunction"}
        and permission["InvokedViaFunctionUrl"] is True
    )


def test_the_worker_takes_the_adapter_s_events_fails_over_to_the_queue_and_is_swept():
    worker = resource("WorkerFunction")["Properties"]
    env = function_env("WorkerFunction")
    assert worker["ImageUri"] == resource("ApiFunction")["Properties"]["ImageUri"]
    assert "FunctionUrlConfig" not in worker
    settings = GatewaySettings(**{k.removeprefix("A2A_GATEWAY_").lower(): resolved(v)
                                  for k, v in env.items() if k.startswith("A2A_GATEWAY_")})
    assert settings.worker is True and settings.dispatch == "in_process"
    assert env["AWS_LWA_PASS_THROUGH_PATH"] == settings.worker_events_path
    assert env["AWS_LWA_INVOKE_MODE"] == "buffered"
    assert env["AWS_LWA_ERROR_STATUS_CODES"] == "400-599"  # as lambda_handler: not 2xx fails
    invoke = worker["EventInvokeConfig"]
    assert {"MaximumRetryAttempts", "MaximumEventAgeInSeconds"} <= set(invoke)
    on_failure = invoke["DestinationConfig"]["OnFailure"]
    assert on_failure == {
        "Type": "SQS",
        "Destination": {"Fn::GetAtt": ["FailedEventsQueue", "Arn"]},
    }
    (schedule,) = worker["Events"].values()
    assert schedule["Type"] == "Schedule"
    assert json.loads(schedule["Properties"]["Input"]) == SWEEP_EVENT
    assert parse_event(schedule["Properties"]["Input"].encode()) is None  # the worker sweeps


def test_the_tables_come_from_the_dynamodb_template():
    store = resource("Store")
    assert store["Type"] == "AWS::CloudFormation::Stack"
    assert (
        TEMPLATE.parent / store["Properties"]["TemplateURL"]
    ).resolve() == DEPLOY / "dynamodb" / "template.yaml"
    assert not [
        name for name, r in template()["Resources"].items() if r["Type"] == "AWS::DynamoDB::Table"
    ]
    nested = dynamodb_template()
    assert set(store["Properties"]["Parameters"]) <= set(nested["Parameters"])
    used = {
        attribute.removeprefix("Outputs.")
        for target, attribute in references(template())
        if target == "Store"
    }
    assert used == {"StoreUrl", "GatewayStorePolicyArn"} and used <= set(nested["Outputs"])


def test_every_reference_resolves():
    known = set(template()["Parameters"]) | set(template()["Resources"]) | GENERATED
    known |= {"AWS::NoValue", "AWS::Region", "AWS::StackName", "AWS::AccountId", "AWS::Partition"}
    conditions = set(template()["Conditions"])
    for target, _ in references(template()):
        assert target in known, target
    for name, value in template()["Resources"].items():
        assert value.get("Condition", next(iter(conditions))) in conditions, name


def test_each_role_may_do_only_its_function_s_part():
    for role, function, extra in (
        ("ApiRole", "ApiFunction", {("lambda:InvokeFunction", "WorkerFunction")}),
        ("WorkerRole", "WorkerFunction", {("sqs:SendMessage", "FailedEventsQueue")}),
    ):
        assert resource(function)["Properties"]["Role"] == {"Fn::GetAtt": [role, "Arn"]}
        properties = resource(role)["Properties"]
        assert properties["ManagedPolicyArns"] == [
            {"Fn::GetAtt": ["Store", "Outputs.GatewayStorePolicyArn"]}
        ]
        granted = set()
        for statement in statements(role):
            assert statement["Effect"] == "Allow" and "*" not in json.dumps(statement["Resource"])
            actions = (
                statement["Action"]
                if isinstance(statement["Action"], list)
                else [statement["Action"]]
            )
            for action in actions:
                assert "*" not in action, f"{role}: {action}"
                granted.add((action, references(statement["Resource"])[0][0]))
        log_group = resource(function)["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        assert granted == {("logs:CreateLogStream", log_group), ("logs:PutLogEvents", log_group),
                           ("secretsmanager:GetSecretValue", "GatewaySecretArn")} | extra, role
        assert resource(log_group)["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    store_policy = dynamodb_template()["Resources"]["GatewayStorePolicy"]["Properties"][
        "PolicyDocument"
    ]
    (tables,) = store_policy["Statement"]
    table_names = {
        n
        for n, r in dynamodb_template()["Resources"].items()
        if r["Type"] == "AWS::DynamoDB::Table"
    }
    for arn in tables["Resource"]:  # a table, or its indexes
        assert arn in [{"Fn::GetAtt": [t, "Arn"]} for t in table_names] + [
            {"Fn::Sub": f"${{{t}.Arn}}/index/*"} for t in table_names], arn
