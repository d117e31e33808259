"""What ``sluice check`` says about the handlers' way to the internet (issue 33, item 1).

A default deploy gives the functions no route out (``HandlerEgress=none``): a handler that calls an
outside API waits for its timeout. ``http_client_imports`` finds the HTTP clients a handlers module
imports, in its own source and in the modules of its own code it imports (read, never run: the AST),
and ``warning`` says so when the deploy's parameters give no way out. boto3 and botocore are not
clients here: the stack has VPC endpoints for every AWS service Sluice calls, and a handler's own
AWS calls are the deploy's business (docs/deploy.md, Handler egress).
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# Modules whose import means the code speaks HTTP to somewhere (a submodule of one counts too).
HTTP_CLIENTS = ("requests", "httpx", "urllib3", "aiohttp", "urllib.request", "http.client", "httplib2",
                "pycurl")
# Never followed: Sluice's own packages (ctx.http, the runtime's pools) and what is installed.
_NOT_THE_TEAMS = ("sluice", "sluice_dev", "sluice_fence")


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    client: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.client}"


def imported(source: str, package: str = "") -> list[tuple[str, int]]:
    """(module, line) for every import in ``source``; ``from a import b`` gives ``a`` and ``a.b`` (b may be a
    submodule), relative imports resolved against ``package``. Pure: parses, runs nothing."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parent = parts[: max(0, len(parts) - node.level + 1)]
                base = ".".join([*parent, *([base] if base else [])])
            out.append((base, node.lineno))
            out += [(f"{base}.{alias.name}" if base else alias.name, node.lineno) for alias in node.names]
    return out


def clients(modules: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """The (client, line) among ``modules``: an HTTP client, or a submodule of one."""
    found: list[tuple[str, int]] = []
    for module, line in modules:
        for client in HTTP_CLIENTS:
            if (module == client or module.startswith(client + ".")) and (client, line) not in found:
                found.append((client, line))
                break
    return found


def _own_file(module: str, root: Path) -> Path | None:
    """The file of ``module`` if it is the team's own code: under ``root``, not installed, not Sluice's."""
    if module.split(".")[0] in _NOT_THE_TEAMS:
        return None
    loaded = sys.modules.get(module)
    path = getattr(loaded, "__file__", None)
    if not path:
        return None
    file = Path(path).resolve()
    if not file.is_relative_to(root) or {"site-packages", "dist-packages"} & set(file.parts):
        return None
    return file


def http_client_imports(module_name: str) -> list[Finding]:
    """Every HTTP client the handlers module and the modules of its own code it loads import, by file and
    line (``sluice check`` has imported it already, as the worker would)."""
    start = importlib.import_module(module_name)
    file = Path(start.__file__ or "").resolve()
    depth = module_name.count(".") + (1 if file.name == "__init__.py" else 0)
    root = file.parents[depth]
    found: list[Finding] = []
    seen: set[str] = set()
    todo = [(module_name, file)]
    while todo:
        name, path = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        modules = imported(path.read_text(encoding="utf-8"), package)
        shown = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        found += [Finding(shown, line, client) for client, line in clients(modules)]
        todo += [(m, own) for m, _ in modules if m not in seen and (own := _own_file(m, root)) is not None]
    return sorted(set(found), key=lambda f: (f.path, f.line, f.client))


def has_egress(parameters: Mapping[str, str]) -> bool | None:
    """Whether a deploy with these parameters gives handlers a way out; None where the template does not
    say (it has neither parameter). An existing VPC whose endpoints this stack does not make keeps HTTPS
    open to wherever the VPC routes it, which only its owner knows: not warned about either."""
    if "HandlerEgress" in parameters:  # template.yaml
        if str(parameters.get("VpcId", "")) and str(parameters.get("CreateVpcEndpoints", "true")) == "false":
            return None
        return str(parameters["HandlerEgress"]) != "none"
    if "Egress" in parameters:  # a team's infra/worker.yaml
        return str(parameters["Egress"]) != "none"
    return None


def warning(parameters: Mapping[str, str], findings: list[Finding]) -> str | None:
    """The warning for handlers that import an HTTP client in a deploy without egress (pure)."""
    if not findings or has_egress(parameters) is not False:
        return None
    where = "; ".join(str(f) for f in findings[:5])
    where += f"; and {len(findings) - 5} more" if len(findings) > 5 else ""
    if "HandlerEgress" in parameters:
        choice = "HandlerEgress=none"
        fix = "choose HandlerEgress=nat-single or nat-per-az (existing-nat with VpcId)"
    else:
        choice, fix = "Egress=none", "set Egress=internet (the Sluice stack's HandlerEgress must not be none)"
    return (f"the handlers import an HTTP client ({where}) but this deploy gives them no way to the internet "
            f"({choice}): a call to a host outside AWS waits until it times out. To call out, {fix} "
            "(docs/deploy.md, Handler egress); hosts inside the VPC need nothing.")
