"""Handler egress (issue 33, item 1): each HandlerEgress choice, as CloudFormation would resolve it.

none (the default) creates no way out and changes nothing of before; nat-single and nat-per-az put
NAT gateways in the VPC the stack creates, each private subnet routed through one (its own AZ's with
nat-per-az); existing-nat uses an existing VPC's routes. Whatever the choice, only the worker
functions join the security group that lets HTTPS out; a team's worker opts in with Egress=internet.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from tests.infra import cfn

T = cfn.template()
NETWORK = cfn.load(cfn.NESTED["network"])
TEAM = cfn.load(cfn.ROOT / "infra" / "worker.yaml")
CHOICES = ("none", "nat-single", "nat-per-az", "existing-nat")
EXISTING = {"VpcId": "vpc-0123456789abcdef0", "PrivateSubnetIds": "subnet-0a,subnet-0b",
            "PrivateRouteTableIds": "rtb-0a"}


def deploy(choice: str) -> dict[str, Any]:
    """The parameters of a deploy with HandlerEgress=choice (in an existing VPC for existing-nat)."""
    return {"HandlerEgress": choice, **(EXISTING if choice == "existing-nat" else {})}


def present(doc: dict[str, Any], conds: dict[str, bool]) -> dict[str, dict[str, Any]]:
    """The resources a deploy creates, their properties resolved."""
    return {name: {**r, "Properties": cfn.resolve(r.get("Properties", {}), conds)}
            for name, r in doc["Resources"].items() if conds.get(r.get("Condition", ""), True)}


def network(**overrides: Any) -> tuple[dict[str, dict[str, Any]], dict[str, Any], dict[str, bool]]:
    params = cfn.parameters(NETWORK, **overrides)
    conds = cfn.conditions(NETWORK, params)
    return present(NETWORK, conds), params, conds


def value(expr: Any, params: dict[str, Any]) -> Any:
    """Ref (a parameter), Fn::Select, Fn::Cidr and Fn::GetAZs, as CloudFormation computes them."""
    if isinstance(expr, dict) and "Ref" in expr:
        return params[expr["Ref"]]
    if isinstance(expr, dict) and "Fn::Select" in expr:
        index, items = expr["Fn::Select"]
        return value(items, params)[int(index)]
    if isinstance(expr, dict) and "Fn::Cidr" in expr:
        block, count, bits = (value(x, params) for x in expr["Fn::Cidr"])
        net = ipaddress.ip_network(block)
        return [str(s) for s in list(net.subnets(new_prefix=32 - int(bits)))[:int(count)]]
    if isinstance(expr, dict) and "Fn::GetAZs" in expr:
        return ["az-0", "az-1", "az-2"]
    return expr


def refs(expr: Any) -> list[str]:
    if isinstance(expr, dict) and set(expr) == {"Ref"}:
        return [expr["Ref"]]
    if isinstance(expr, dict) and "Fn::Join" in expr:
        return [name for part in expr["Fn::Join"][1] for name in refs(part)]
    return []


# ------------------------------------------------------------------ the default: nothing new


def test_the_default_is_none_and_creates_no_way_out() -> None:
    param = T["Parameters"]["HandlerEgress"]
    assert param["Default"] == "none" and param["AllowedValues"] == list(CHOICES)
    assert NETWORK["Parameters"]["Egress"]["Default"] == "none"
    made, _, _ = network()
    kinds = {r["Type"] for r in made.values()}
    assert not kinds & {"AWS::EC2::InternetGateway", "AWS::EC2::NatGateway", "AWS::EC2::EIP",
                        "AWS::EC2::Route", "AWS::EC2::VPCGatewayAttachment"}, kinds
    assert sorted(n for n, r in made.items() if r["Type"] == "AWS::EC2::RouteTable") == ["PrivateRouteTable"]
    assert not [n for n in made if n.startswith("PublicSubnet")]
    conds = cfn.conditions(T, cfn.parameters(T))
    assert cfn.resolve(T["Resources"]["Network"]["Properties"]["Parameters"]["Egress"], conds) == "none"
    assert "HandlerEgressSecurityGroup" not in present(T, conds)


# ------------------------------------------------------------------ the network's routes


@pytest.mark.parametrize(("egress", "subnets"), [("nat-single", 3), ("nat-single", 2), ("nat-per-az", 3),
                                                 ("nat-per-az", 2)])
def test_each_private_subnet_leaves_through_a_nat_gateway(egress: str, subnets: int) -> None:
    made, params, _ = network(Egress=egress, SubnetCount=subnets)
    az = {name: value(r["Properties"]["AvailabilityZone"], params)
          for name, r in made.items() if r["Type"] == "AWS::EC2::Subnet"}
    tables = {r["Properties"]["SubnetId"]["Ref"]: r["Properties"]["RouteTableId"]["Ref"]
              for r in made.values() if r["Type"] == "AWS::EC2::SubnetRouteTableAssociation"}
    default = {r["Properties"]["RouteTableId"]["Ref"]: r["Properties"]
               for r in made.values() if r["Type"] == "AWS::EC2::Route"}
    nats = {n: r["Properties"] for n, r in made.items() if r["Type"] == "AWS::EC2::NatGateway"}
    assert len(nats) == (1 if egress == "nat-single" else subnets)
    private = sorted(n for n in az if n.startswith("PrivateSubnet"))
    assert len(private) == subnets
    for subnet in private:
        route = default[tables[subnet]]
        assert route["DestinationCidrBlock"] == "0.0.0.0/0"
        nat = nats[route["NatGatewayId"]["Ref"]]
        public = nat["SubnetId"]["Ref"]
        assert public.startswith("PublicSubnet") and public in az
        if egress == "nat-per-az":  # its own AZ's gateway: an AZ lost takes no other AZ's egress
            assert az[public] == az[subnet], subnet
        # The public subnet's way out is the internet gateway; each NAT gateway has its own address.
        assert default[tables[public]]["GatewayId"] == {"Ref": "InternetGateway"}
        assert made[nat["AllocationId"]["Fn::GetAtt"][0]]["Type"] == "AWS::EC2::EIP"
    assert "InternetGatewayAttachment" in made
    # The gateway endpoints (DynamoDB, S3) go on every private route table, or those calls would take
    # the NAT gateway (and pay for it).
    conds = cfn.conditions(NETWORK, params)
    listed = refs(cfn.resolve(NETWORK["Outputs"]["RouteTableIds"]["Value"], conds))
    assert sorted(listed) == sorted({tables[s] for s in private})
    addresses = refs(cfn.resolve(NETWORK["Outputs"]["EgressIps"]["Value"], conds))
    assert sorted(addresses) == sorted(n["AllocationId"]["Fn::GetAtt"][0] for n in nats.values())


@pytest.mark.parametrize("cidr", ["10.42.0.0/16", "10.0.0.0/18", "172.16.0.0/17"])
def test_the_public_subnets_fit_the_vpc_beside_the_private_ones(cidr: str) -> None:
    made, params, _ = network(Egress="nat-per-az", VpcCidr=cidr)
    blocks = {n: ipaddress.ip_network(value(r["Properties"]["CidrBlock"], params))
              for n, r in made.items() if r["Type"] == "AWS::EC2::Subnet"}
    assert len(blocks) == 6
    vpc = ipaddress.ip_network(cidr)
    for name, block in blocks.items():
        assert block.subnet_of(vpc), name  # type: ignore[arg-type]
        for other, theirs in blocks.items():
            assert other == name or not block.overlaps(theirs), (name, other)


def test_the_nat_gateways_public_subnets_give_nothing_a_public_address() -> None:
    made, _, _ = network(Egress="nat-per-az")
    for name, r in made.items():
        if r["Type"] == "AWS::EC2::Subnet":
            assert r["Properties"]["MapPublicIpOnLaunch"] is False, name


# ------------------------------------------------------------------ who may go out


@pytest.mark.parametrize("choice", CHOICES)
def test_only_the_workers_may_use_the_way_out(choice: str) -> None:
    conds = cfn.conditions(T, cfn.parameters(T, **deploy(choice)))
    made = present(T, conds)
    if choice == "none":
        assert "HandlerEgressSecurityGroup" not in made
    else:
        group = made["HandlerEgressSecurityGroup"]["Properties"]
        assert group["SecurityGroupEgress"] == [{
            "Description": "HTTPS to anywhere the VPC routes it (the NAT gateways)", "IpProtocol": "tcp",
            "FromPort": 443, "ToPort": 443, "CidrIp": "0.0.0.0/0"}]
        assert "SecurityGroupIngress" not in group
        assert not [n for n, r in made.items() if r["Type"] == "AWS::EC2::SecurityGroupEgress"
                    and r["Properties"]["GroupId"] == {"Ref": "HandlerEgressSecurityGroup"}]
    base = [{"Ref": "FunctionSecurityGroup"}]
    for name, fn in made.items():
        if fn["Type"] != "AWS::Serverless::Function" or "VpcConfig" not in fn["Properties"]:
            continue
        groups = fn["Properties"]["VpcConfig"]["SecurityGroupIds"]
        if name == "WorkerFunction" and choice != "none":
            assert groups == [*base, {"Ref": "HandlerEgressSecurityGroup"}], name
        else:
            assert groups == base, name


@pytest.mark.parametrize("choice", CHOICES)
def test_the_network_gets_the_nat_choices_only(choice: str) -> None:
    params = cfn.parameters(T, **deploy(choice))
    conds = cfn.conditions(T, params)
    given = T["Resources"]["Network"]["Properties"]["Parameters"]["Egress"]
    passed = value(cfn.resolve(given, conds), params)
    assert passed in NETWORK["Parameters"]["Egress"]["AllowedValues"]
    assert conds["CreateNat"] == (choice in ("nat-single", "nat-per-az"))
    if conds["CreateNetwork"]:
        assert passed == choice


def _rule_holds(name: str, params: dict[str, Any]) -> bool:
    rule = T["Rules"][name]
    exprs = {"when": rule.get("RuleCondition", {"Fn::Equals": ["a", "a"]}),
             **{f"a{i}": a["Assert"] for i, a in enumerate(rule["Assertions"])}}
    truth = cfn.conditions({"Conditions": exprs}, params)
    return not truth["when"] or all(v for k, v in truth.items() if k != "when")


@pytest.mark.parametrize(("overrides", "holds"), [
    ({"HandlerEgress": "none"}, True),
    ({"HandlerEgress": "nat-single"}, True),
    ({"HandlerEgress": "nat-per-az"}, True),
    ({"HandlerEgress": "nat-single", **EXISTING}, False),
    ({"HandlerEgress": "nat-per-az", **EXISTING}, False),
    ({"HandlerEgress": "existing-nat", **EXISTING}, True),
    ({"HandlerEgress": "existing-nat"}, False),
    ({"HandlerEgress": "none", **EXISTING}, True),
])
def test_the_rules_pair_nat_with_the_stacks_vpc_and_existing_nat_with_yours(overrides: dict[str, Any],
                                                                            holds: bool) -> None:
    params = cfn.parameters(T, **overrides)
    rules = ("NatNeedsTheStacksVpc", "ExistingNatNeedsAnExistingVpc")
    assert all(_rule_holds(rule, params) for rule in rules) == holds


def test_the_outputs_name_the_choice_the_group_and_the_addresses() -> None:
    out = T["Outputs"]
    assert out["HandlerEgress"]["Value"] == {"Ref": "HandlerEgress"}
    group = out["HandlerEgressSecurityGroupId"]
    assert group["Condition"] == "HandlerEgressOpen"
    assert group["Value"] == {"Ref": "HandlerEgressSecurityGroup"}
    assert group["Export"]["Name"] == {"Fn::Sub": "${AWS::StackName}-HandlerEgressSecurityGroupId"}
    assert out["HandlerEgressIps"]["Condition"] == "CreateNat"
    assert cfn.is_getatt(out["HandlerEgressIps"]["Value"], "Network", "Outputs.EgressIps")
    assert NETWORK["Outputs"]["EgressIps"]["Condition"] == "Nat"


# ------------------------------------------------------------------ a team's worker


@pytest.mark.parametrize("egress", ["none", "internet"])
def test_a_teams_worker_chooses_its_own(egress: str) -> None:
    assert TEAM["Parameters"]["Egress"]["Default"] == "none"
    assert TEAM["Parameters"]["Egress"]["AllowedValues"] == ["none", "internet"]
    conds = cfn.conditions(TEAM, cfn.parameters(TEAM, Egress=egress, SluiceLayerArn="arn"))
    fn = present(TEAM, conds)["TeamWorkerFunction"]["Properties"]
    groups = fn["VpcConfig"]["SecurityGroupIds"]
    imported = [g["Fn::ImportValue"]["Fn::Sub"] for g in groups]
    expected = ["${SluiceStackName}-FunctionSecurityGroupId"]
    if egress == "internet":
        expected.append("${SluiceStackName}-HandlerEgressSecurityGroupId")
    assert imported == expected
    # The Sluice stack exports that name, and only with a way out.
    stack_export = T["Outputs"]["HandlerEgressSecurityGroupId"]["Export"]["Name"]["Fn::Sub"]
    assert stack_export.replace("AWS::StackName", "SluiceStackName") == expected[-1] or egress == "none"
    # It stays in the Sluice VPC's private subnets: Redis is reachable nowhere else.
    assert fn["VpcConfig"]["SubnetIds"] == {"Fn::Split": [",", {"Fn::ImportValue": {
        "Fn::Sub": "${SluiceStackName}-PrivateSubnetIds"}}]}
