"""The field-guide pages of causes: `causes.yaml` beside the playbooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fieldguide.playbook.schema import Cause, check_id, template_fields
from fieldguide.playbook.source import (
    PlaybookError,
    check_fields,
    is_file,
    playbook_dirs,
    read_playbook_file,
    shown,
    text_field,
)
from fieldguide.playbook.yamlread import LineDict

CAUSES_FILE = "causes.yaml"
CAUSE_FIELDS = {"title", "summary", "why", "fix", "verify", "experiment"}
EXPERIMENT_FIELDS = {"override", "values", "cuda_values", "env", "none", "equivalence"}
# What an experiment may set in the relaunched job's environment: settings of torch, CUDA and the
# thread pools, never a variable that loads code (PYTHONPATH, LD_PRELOAD, BASH_ENV, PYTHONSTARTUP).
EXPERIMENT_ENV = frozenset({
    "FIELDGUIDE_OVERRIDES", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_LAUNCH_BLOCKING", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "TORCH_COMPILE_DISABLE", "TORCHDYNAMO_DISABLE", "TORCH_LOGS", "CUDA_MODULE_LOADING",
    "NCCL_DEBUG", "PYTORCH_NO_CUDA_MEMORY_CACHING", "TORCHINDUCTOR_FX_GRAPH_CACHE",
})


def load_causes(directory: Path) -> dict[str, Cause]:
    """The field-guide pages of causes, from `causes.yaml` next to the playbooks."""
    causes: dict[str, Cause] = {}
    for d in [directory, *playbook_dirs()]:
        path = d / CAUSES_FILE
        if not is_file(path):
            continue
        data = read_playbook_file(path)
        if not isinstance(data, LineDict):
            raise PlaybookError(path, 1, "must be a mapping of cause ids to pages")
        for cause_id, page in data.items():
            if not isinstance(cause_id, str) or not check_id(cause_id) or "." not in cause_id:
                raise PlaybookError(path, data.line_of(cause_id), f"cause id {shown(repr(cause_id))} must be "
                                    "area.name of letters, digits, '.', '_' and '-'", field="id")
            if cause_id in causes:
                continue
            if not isinstance(page, LineDict):
                raise PlaybookError(path, data.line_of(cause_id), "a cause page must be a mapping", field=str(cause_id))
            check_fields(page, CAUSE_FIELDS, path, f"cause {cause_id}")
            fix = page.get("fix")
            if not isinstance(fix, list) or not fix or not all(isinstance(s, str) for s in fix):
                raise PlaybookError(path, page.line_of("fix"), "must be a list of steps (quote a step that contains \": \")", node=f"cause {cause_id}", field="fix")
            summary = text_field(page, "summary", path, f"cause {cause_id}")
            try:
                template_fields(summary)
            except ValueError as err:
                raise PlaybookError(path, page.line_of("summary"), str(err), node=f"cause {cause_id}", field="summary") from None
            experiment = _experiment(page, path, str(cause_id))
            causes[cause_id] = Cause(
                id=cause_id,
                title=text_field(page, "title", path, f"cause {cause_id}"),
                summary=summary,
                why=text_field(page, "why", path, f"cause {cause_id}"),
                fix=tuple(s.strip() for s in fix),
                verify=text_field(page, "verify", path, f"cause {cause_id}"),
                experiment=experiment,
            )
    return causes


def _experiment(page: LineDict, path: Path, cause_id: str) -> dict[str, Any] | None:
    """A cause's fix as an experiment fieldguide can run (`--try-fix`): an agent override with the
    values to try (`override`, `values`), an environment (`env`), or `none: why` for a fix that
    is a code change."""
    raw = page.get("experiment")
    if raw is None:
        return None
    where = (path, page.line_of("experiment"))
    if not isinstance(raw, LineDict) or not raw or set(raw) - EXPERIMENT_FIELDS:
        raise PlaybookError(*where, f"must be a mapping of {', '.join(sorted(EXPERIMENT_FIELDS))}",
                            node=f"cause {cause_id}", field="experiment")
    if "none" in raw:
        if set(raw) != {"none"} or not isinstance(raw["none"], str):
            raise PlaybookError(*where, "none: says why there is no experiment, alone", node=f"cause {cause_id}",
                                field="experiment")
        return {"none": raw["none"].strip()}
    override, values, env = raw.get("override"), raw.get("values"), raw.get("env")
    if override is not None and (not isinstance(override, str) or not isinstance(values, list) or not values):
        raise PlaybookError(*where, "override needs a name and a list of values to try", node=f"cause {cause_id}",
                            field="experiment")
    if env is not None and (not isinstance(env, dict) or not all(isinstance(v, (str, int)) for v in env.values())):
        raise PlaybookError(*where, "env must map variables to values", node=f"cause {cause_id}", field="experiment")
    refused = sorted(str(k) for k in (env or {}) if str(k) not in EXPERIMENT_ENV)
    if refused:  # PYTHONPATH, LD_PRELOAD, BASH_ENV... would run a colleague's code in the relaunched job
        raise PlaybookError(*where, f"env may set only {', '.join(sorted(EXPERIMENT_ENV))}; not "
                            f"{shown(refused[0])}", node=f"cause {cause_id}", field="experiment")
    if any("\n" in str(v) or "\0" in str(v) or len(str(v)) > 1000 for v in (env or {}).values()):
        raise PlaybookError(*where, "env values must be one line of at most 1000 characters",
                            node=f"cause {cause_id}", field="experiment")
    if override is None and env is None:
        raise PlaybookError(*where, "needs an override with values, an env, or none", node=f"cause {cause_id}",
                            field="experiment")
    cuda_values = raw.get("cuda_values")
    if cuda_values is not None and (override is None or not isinstance(cuda_values, list)):
        raise PlaybookError(*where, "cuda_values: more values of the override, tried on a job that uses CUDA",
                            node=f"cause {cause_id}", field="experiment")
    found: dict[str, Any] = {"override": override, "values": list(values or []), "cuda_values": list(cuda_values or []),
             "env": {str(k): str(v) for k, v in (env or {}).items()}}
    if "equivalence" in raw:
        found["equivalence"] = _equivalence(raw["equivalence"], where, cause_id)
    return found


def _equivalence(raw: Any, where: tuple[Path, int], cause_id: str) -> dict[str, float]:
    """`equivalence: {rtol: 0.001}`: each arm's first losses must match the job's within rtol."""
    rtol = raw.get("rtol") if isinstance(raw, LineDict) and set(raw) <= {"rtol"} else None
    if not isinstance(rtol, (int, float)) or isinstance(rtol, bool) or not 0 < rtol < 1:
        raise PlaybookError(*where, "equivalence: {rtol: r} with 0 < r < 1, the largest relative difference "
                            "of an arm's losses from the job's", node=f"cause {cause_id}", field="experiment")
    return {"rtol": float(rtol)}
