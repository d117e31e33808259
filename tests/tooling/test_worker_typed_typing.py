"""``@app.handler(q, model=M)`` under mypy --strict: the decorated function keeps its type, and a
handler whose first parameter is not ``M`` is a type error (issue 15).

A tooling test, not a unit one, for its cost: mypy checks the snippet's imports too, all of ``sluice``,
which took 18 CPU-s from a cold cache (the unit tier's slowest test, beside ``make typecheck`` doing
the same work). ``make test`` runs this tier after ``make typecheck``, so a copy of that run's cache
(``.mypy_cache``) makes it 0.6 CPU-s; without one, mypy starts cold and the answer is the same."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = textwrap.dedent('''\
    from typing import Any

    from pydantic import BaseModel

    import sluice
    from sluice.core.models import Job
    from sluice.worker.runtime.context import JobContext


    class Thumb(BaseModel):
        url: str


    class Other(BaseModel):
        x: int


    app = sluice.Worker()


    @app.handler("t", model=Thumb, timeout_s=5)
    def typed(req: Thumb, ctx: JobContext) -> dict[str, Any]:
        return {"u": req.url}


    @app.handler("p")
    def plain(job: Job, ctx: JobContext) -> int:
        return 1


    reveal_type(typed)
    reveal_type(plain)


    @app.handler("wrong-model", model=Thumb)
    def wrong_model(req: Other, ctx: JobContext) -> None: ...


    @app.handler("takes-the-job", model=Thumb)
    def takes_the_job(job: Job, ctx: JobContext) -> None: ...
    ''')


def test_the_decorator_keeps_the_handler_type_and_checks_the_model(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    probe = tmp_path / "typed_probe.py"
    probe.write_text(SNIPPET)
    if (ROOT / ".mypy_cache").is_dir():  # a copy: this run's entries must not land in the project's cache
        shutil.copytree(ROOT / ".mypy_cache", tmp_path / "cache")
    out, err, _status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--strict",
                                 "--cache-dir", str(tmp_path / "cache"), str(probe)])
    # mypy versions differ in whether they spell out "builtins."
    lines = [line.split(": ", 1)[1].replace("builtins.", "") for line in out.splitlines()
             if line.startswith(str(probe))]
    assert lines == [
        'note: Revealed type is "def (typed_probe.Thumb, sluice.worker.runtime.context.JobContext) -> '
        'dict[str, Any]"',
        'note: Revealed type is "def (job: sluice.core.models.Job, '
        'ctx: sluice.worker.runtime.context.JobContext) -> '
        'int"',
        'error: Argument 1 has incompatible type "Callable[[Other, JobContext], None]"; expected '
        '"Callable[[Thumb, JobContext], None]"  [arg-type]',
        'error: Argument 1 has incompatible type "Callable[[Job, JobContext], None]"; expected '
        '"Callable[[Thumb, JobContext], None]"  [arg-type]',
    ], out + err
