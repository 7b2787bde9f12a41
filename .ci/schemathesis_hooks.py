"""Schemathesis hooks of .ci/schemathesis: what the checks cannot learn from an OpenAPI document.

A finish removes its job: `POST /v1/jobs/{id}/finish` answers 204, and `POST /v1/finish`
answers 200 without the id in `missing`, and the job is gone (docs/api.md). The
`ensure_resource_availability` check counts only a DELETE, or an unsafe request to the very
same path, as the removal of a job a test created, so a 404 from that job's other routes after
its finish reads to it as a created job that got lost. OpenAPI has no way to say that a POST
removes a resource, so here a successful finish counts as the job's removal, as a DELETE of it
does: a job created, finished and not pushed again since. Every check stays on for every
operation; a 404 for a job created and not removed still fails.

Second, the check compares a 404 with the job its parent request created only when the
request names that job. A link may put an id holding `%XX` sequences (one schemathesis took
from a percent-encoded path and put in a pushed job's `id`) into a path as if it were already
encoded; the server decodes the path (RFC 3986, docs/api.md), so the request names another job,
and its 404 says nothing about the one created. Such a request is not judged by this check.

Written against schemathesis 4.32 (.ci/requirements.txt pins it): it wraps the
`resource_was_deleted` that the check (and link calibration) asks, and the check itself.
"""

from urllib.parse import unquote

from schemathesis.checks import CHECKS
from schemathesis.specs.openapi import checks
from schemathesis.specs.openapi.stateful import link_calibration

_builtin = checks.resource_was_deleted
_builtin_check = CHECKS.get_one("ensure_resource_availability")


def _json(response):
    try:
        return response.json()
    except Exception:
        return None


def _job_id(case):
    """The id of the job `case` addresses by its path, if any (`/v1/jobs/batch` is job `batch`),
    decoded: a path parameter may be held percent-encoded."""
    if case.path == "/v1/jobs/batch":
        return "batch"
    job = (case.path_parameters or {}).get("id") if case.path.startswith("/v1/jobs/{id}") else None
    return unquote(job) if isinstance(job, str) else None


def _finished(case, response, job):
    """Whether `case` (answered `response`) finished `job`."""
    if case.operation.method.upper() != "POST":
        return False
    if case.path == "/v1/jobs/{id}/finish":
        return response.status_code == 204 and _job_id(case) == job
    if case.path == "/v1/finish" and response.status_code == 200:
        ids = case.body.get("ids") if isinstance(case.body, dict) else None
        reply = _json(response)
        missing = reply.get("missing", []) if isinstance(reply, dict) else []
        return isinstance(ids, list) and job in ids and job not in missing
    return False


def _pushed_ids(case, response):
    """The ids of the jobs `case` (answered `response`) pushed."""
    if case.operation.method.upper() != "POST":
        return set()
    reply = _json(response)
    if not isinstance(reply, dict):
        return set()
    if case.path == "/v1/jobs" and response.status_code == 201:
        return {reply.get("id")}
    if case.path == "/v1/jobs/batch" and response.status_code == 200:
        return {
            r.get("id")
            for r in reply.get("results", [])
            if isinstance(r, dict) and r.get("status") in ("created", "replaced")
        }
    return set()


def _pushed(case, response, job):
    """Whether `case` (answered `response`) pushed `job` (again)."""
    return job in _pushed_ids(case, response)


def resource_was_deleted(recorder, case, *, created_by=None):
    if _builtin(recorder, case, created_by=created_by):
        return True
    job = _job_id(case)
    if job is None:
        return False
    # In the order the requests were made, up to this one: finished, and not pushed since.
    gone = False
    for prior in recorder.find_all_cases():
        if prior.id == case.id:
            break
        response = recorder.find_response(case_id=prior.id)
        if response is None:
            continue
        if _finished(prior, response, job):
            gone = True
        elif _pushed(prior, response, job):
            gone = False
    return gone


checks.resource_was_deleted = resource_was_deleted
link_calibration.resource_was_deleted = resource_was_deleted


def ensure_resource_availability(ctx, response, case):
    """The built-in check, for requests that name a job their parent request pushed. Registered
    in its place, under its name (so its settings apply)."""
    if response.status_code == 404:
        parent = ctx.internals.find_parent(case_id=case.id)
        answer = ctx.internals.find_response(case_id=parent.id) if parent is not None else None
        pushed = _pushed_ids(parent, answer) if answer is not None else set()
        job = _job_id(case)
        if pushed and job is not None and job not in pushed:
            return None
    return _builtin_check(ctx, response, case)


CHECKS.unregister("ensure_resource_availability")
CHECKS.register(ensure_resource_availability)
