"""Request parsing and response helpers shared by handlers."""

from __future__ import annotations

import dataclasses
import datetime
import json
import uuid as uuidlib
from typing import Any

import jsonschema
import webob
from oslo_config import cfg
from oslo_policy import policy

from acceld.api import errors
from acceld.db.api import Database
from acceld.rpc import ConductorClient


@dataclasses.dataclass(frozen=True)
class AppState:
    """What every handler needs: passed in, never imported."""

    conf: cfg.ConfigOpts
    db: Database
    conductor: ConductorClient
    enforcer: policy.Enforcer


def state(req: webob.Request) -> AppState:
    return req.environ["acceld.app"]


def authorize(req: webob.Request, rule: str) -> None:
    ctx = req.environ["acceld.context"]
    target = {"project_id": ctx.project_id, "user_id": ctx.user_id}
    creds = ctx.to_policy_values()
    if not state(req).enforcer.authorize(rule, target, creds, do_raise=False):
        raise errors.HTTPError(403, f"Policy does not allow {rule} to be performed.",
                               "acceld.forbidden")


def _schema_error(err: jsonschema.ValidationError, what: str) -> str:
    where = "/".join(str(p) for p in err.absolute_path)
    if err.validator == "additionalProperties" and err.instance is not None:
        return f"Invalid {what}: {err.message}"
    return f"Invalid {what}{' field ' + repr(where) if where else ''}: {err.message}"


def json_body(req: webob.Request, schema: dict[str, Any]) -> Any:
    if req.content_type != "application/json":
        raise errors.HTTPError(415, f"The body must be application/json, not "
                               f"{req.content_type or 'nothing'!r}.", "acceld.media_type")
    try:
        data = json.loads(req.body or b"null")
    except (ValueError, RecursionError) as exc:
        raise errors.HTTPError(400, f"Malformed JSON body: {exc}", "acceld.bad_json") from exc
    validate(data, schema, "body")
    return data


def validate(data: Any, schema: dict[str, Any], what: str) -> None:
    validator = jsonschema.Draft202012Validator(schema,
                                                format_checker=jsonschema.FormatChecker())
    err = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if err is not None:
        raise errors.HTTPError(400, _schema_error(err, what), "acceld.invalid_input")


def canonical_uuid(value: str) -> str:
    """The lower-case hyphenated form of a UUID; anything else is returned unchanged (so
    a lookup of it is a plain 404)."""
    try:
        return str(uuidlib.UUID(value))
    except ValueError:
        return value


def query(req: webob.Request, schema: dict[str, Any]) -> dict[str, str]:
    params: dict[str, str] = {}
    for key in req.GET:
        values = req.GET.getall(key)
        if len(values) > 1:
            raise errors.HTTPError(400, f"Query parameter {key!r} given more than once.",
                                   "acceld.invalid_input")
        params[key] = values[0]
    validate(params, schema, "query")
    return params


def _default(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return value.isoformat()
    raise TypeError(f"cannot serialize {type(value).__name__}")


def json_response(data: Any, status: int = 200,
                  headers: dict[str, str] | None = None) -> webob.Response:
    resp = webob.Response(status=status, content_type="application/json", charset="utf-8")
    resp.text = json.dumps(data, default=_default)
    for key, value in (headers or {}).items():
        resp.headers[key] = value
    return resp


def empty_response(status: int, headers: dict[str, str] | None = None) -> webob.Response:
    resp = webob.Response(status=status)
    resp.content_type = None
    for key, value in (headers or {}).items():
        resp.headers[key] = value
    return resp


def base_url(req: webob.Request) -> str:
    public = state(req).conf.api.public_endpoint
    return (public or req.application_url).rstrip("/")
