"""Request parsing and response helpers shared by handlers."""

from __future__ import annotations

import dataclasses
import datetime
import io
import re
import threading
import time
import urllib.parse
from typing import Any, NamedTuple

import jsonschema
import webob
from oslo_config import cfg
from oslo_policy import policy

from acceld import jsoncodec, limits, notify, uuids, validation
from acceld.api import errors, listcache, metrics, schemas
from acceld.api.reply import Reply as Reply  # handlers use these as util.*
from acceld.api.reply import body_response as body_response
from acceld.api.reply import empty_response as empty_response
from acceld.api.schemas import v2
from acceld.db.api import Database
from acceld.rpc import ConductorClient


class ApiOptions(NamedTuple):
    """The ``[api]`` options a request reads, read once (oslo.config's lookup is costly)."""

    public_endpoint: str | None
    max_limit: int
    max_request_body_size: int
    max_arqs_per_profile: int


class _PolicyDecisions:
    """Memoised oslo.policy decisions (by rule and credentials; bounded), dropped when the
    enforcer's rules change; the policy file is looked at again at most once a second."""

    MAX = 4096
    RECHECK_S = 1.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: object = None
        self._checked = 0.0
        self._decisions: dict[Any, bool] = {}

    def allowed(self, enforcer: policy.Enforcer, rule: str, ctx: Any) -> bool:
        """``rule`` for the caller ``ctx`` on its own project."""
        now = time.monotonic()
        if now - self._checked > self.RECHECK_S or self._rules is None:
            enforcer.load_rules()
            with self._lock:
                self._checked = now
                if enforcer.rules is not self._rules:
                    self._rules = enforcer.rules
                    self._decisions = {}
        key = (rule, creds_key(ctx))
        decision = self._decisions.get(key)
        if decision is None:
            target = {"project_id": ctx.project_id, "user_id": ctx.user_id}
            decision = bool(enforcer.authorize(rule, target, ctx.to_policy_values(),
                                               do_raise=False))
            with self._lock:
                if len(self._decisions) >= self.MAX:
                    self._decisions = {}
                self._decisions[key] = decision
        return decision


@dataclasses.dataclass(frozen=True)
class AppState:
    """What every handler needs: passed in, never imported."""

    conf: cfg.ConfigOpts
    db: Database
    conductor: ConductorClient
    enforcer: policy.Enforcer
    metrics: metrics.ApiMetrics
    notifier: notify.Notifier = notify.DISABLED
    lists: listcache.ListCache = dataclasses.field(default_factory=listcache.ListCache)
    answers: listcache.Replies = dataclasses.field(default_factory=listcache.Replies)
    api: ApiOptions = dataclasses.field(init=False)
    decisions: _PolicyDecisions = dataclasses.field(init=False, default_factory=_PolicyDecisions)
    # the public URL of the links per request host (link_inputs), when not configured
    public_urls: dict[tuple[Any, ...], str] = dataclasses.field(init=False,
                                                                 default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "api", ApiOptions(**{
            name: self.conf.api[name] for name in ApiOptions.__annotations__}))


def state(req: webob.Request) -> AppState:
    return req.environ["acceld.app"]


def creds_key(ctx: Any) -> tuple[Any, ...]:
    """Everything of a RequestContext that ``to_policy_values`` exposes to a rule (the
    target is the caller's own project and user, also in here); kept on the context."""
    key = ctx.__dict__.get("_acceld_policy_key")
    if key is None:
        key = ctx.__dict__["_acceld_policy_key"] = (
            tuple(sorted(ctx.roles)), ctx.project_id, ctx.user_id, ctx.domain_id,
            ctx.user_domain_id, ctx.project_domain_id, ctx.system_scope,
            tuple(sorted(ctx.service_roles)), ctx.service_user_id, ctx.service_project_id,
            ctx.service_user_domain_id, ctx.service_project_domain_id, ctx.is_admin_project)
    return key


# environ key: the policy rules a request's handler checked (a stored answer, see
# listcache.Replies, is served only after the same checks)
ENV_RULES = "acceld.rules"


def allowed(environ: dict[str, Any], rule: str) -> bool:
    """Whether the caller of ``environ`` may ``rule`` on its own project."""
    st = environ["acceld.app"]
    return st.decisions.allowed(st.enforcer, rule, environ["acceld.context"])


def authorize(req: webob.Request, rule: str) -> None:
    env = req.environ
    env[ENV_RULES] = (*env.get(ENV_RULES, ()), rule)
    if not allowed(env, rule):
        raise errors.HTTPError(403, f"Policy does not allow {rule} to be performed.",
                               "acceld.forbidden")


def project_scope(req: webob.Request) -> str | None:
    """The project whose records the caller sees; None (every project) for an admin."""
    ctx = req.environ["acceld.context"]
    return None if ctx.is_admin else ctx.project_id


# the character rules of acceld.limits, as a 400 words them
_CHARACTER_RULES = {
    schemas.NAME_CHARS: "a name takes no control or bidirectional-override character",
    schemas.SHOWN_NAME_CHARS: "a name takes no control or bidirectional-override "
                              "character, and is not only spaces",
    schemas.TEXT_CHARS: "text takes no control character but tab, line feed and carriage "
                        "return",
}


def _schema_error(err: jsonschema.ValidationError, what: str) -> str:
    """The 400's detail: the field and the rule it breaks, repeating at most a short
    prefix of the value (jsonschema's message starts with the whole value's repr)."""
    where = "/".join(str(p) for p in err.absolute_path)
    message = err.message
    whole = repr(err.instance)
    if len(whole) > limits.PREFIX and whole in message:
        message = message.replace(whole, limits.prefix(err.instance), 1)
    if err.validator == "pattern" and err.validator_value in _CHARACTER_RULES:
        message = f"{limits.prefix(err.instance)} holds a character this field does not " \
                  f"take ({_CHARACTER_RULES[err.validator_value]})"
    if err.validator == "additionalProperties" and err.instance is not None:
        return f"Invalid {what}: {message}"[:1000]
    field = f" field {limits.prefix(where, 200)}" if where else ""
    return f"Invalid {what}{field}: {message}"[:1000]


def _too_large(size: str, limit: int) -> errors.HTTPError:
    return errors.HTTPError(413, f"The request body is {size} bytes; at most {limit} are "
                            "accepted ([api] max_request_body_size).", "acceld.body_too_large")


_BODY = "acceld.body"          # environ key of the body read_body read


def read_body(req: webob.Request) -> bytes:
    """The body, at most ``[api] max_request_body_size`` bytes (413 beyond, before a
    declared length is read), read once: a later ``req.body`` or call sees the same bytes."""
    env = req.environ
    if _BODY in env:
        return env[_BODY]
    limit = state(req).api.max_request_body_size
    declared = env.get("CONTENT_LENGTH")
    if declared:
        try:
            length = int(declared)
        except ValueError:
            raise errors.invalid(f"Content-Length {declared!r} is not a number.") from None
        if length > limit:
            raise _too_large(str(length), limit)
        body = env["wsgi.input"].read(length) if length > 0 else b""
    elif req.is_body_readable:              # chunked: read one byte past the limit
        body = env["wsgi.input"].read(limit + 1)
        if len(body) > limit:
            raise _too_large(f"more than {limit}", limit)
    else:
        body = b""
    env["wsgi.input"] = io.BytesIO(body)
    env["CONTENT_LENGTH"] = str(len(body))
    env["webob.is_body_seekable"] = True
    env[_BODY] = body
    return body


def _unstorable(value: Any, strings: bool, where: tuple[Any, ...] = ()) -> str | None:
    """What no database could keep of ``value``, worded: nesting deeper than
    ``limits.JSON_DEPTH``, or (``strings``) a NUL or a lone surrogate in a string or key."""
    if isinstance(value, str):
        bad = _NOT_STORABLE.search(value) if strings else None
        if bad is None:
            return None
        what = "a NUL" if bad.group() == "\x00" else "a lone surrogate"
        return f"{_field(where)} holds {what} character (U+{ord(bad.group()):04X}), which " \
               "no string may hold"
    if not isinstance(value, (dict, list)):
        return None
    if len(where) == limits.JSON_DEPTH:
        return f"{_field(where)} nests deeper than {limits.JSON_DEPTH} levels"
    items = list(value.items() if isinstance(value, dict) else enumerate(value))
    for key, _ in reversed(items):
        if strings and isinstance(key, str) and _NOT_STORABLE.search(key):
            return f"the key of field {_path((*where, key))!r} holds a NUL or a lone " \
                   "surrogate character, which no string may hold"
    for key, item in items:
        bad = _unstorable(item, strings, (*where, key))
        if bad is not None:
            return bad
    return None


def _path(where: tuple[Any, ...]) -> str:
    """A field's path in an error: each key escaped and cut short."""
    return "/".join(ascii(str(key))[1:-1][:limits.PREFIX] for key in where)


def _field(where: tuple[Any, ...]) -> str:
    return f"field {_path(where)!r}" if where else "the body"


_NOT_STORABLE = re.compile("[\x00\ud800-\udfff]")


def json_body(req: webob.Request) -> Any:
    """The JSON body; a 400 for text not UTF-8, NaN, Infinity, numbers beyond a float's
    range and what :func:`_unstorable` finds (the router validates it, ``router.Op``)."""
    # webob's content_type: the header up to any parameters
    content_type = req.environ.get("CONTENT_TYPE", "").split(";", 1)[0]
    if content_type != "application/json":
        _not_json(req, content_type)
    body = read_body(req)
    try:
        data = jsoncodec.loads(body or b"null")
    except (ValueError, RecursionError) as exc:
        raise errors.HTTPError(400, f"Malformed JSON body: {exc}", "acceld.bad_json") from exc
    # only an escape writes a NUL or a surrogate (in UTF-16 or 32 text, a backslash is
    # next to a zero byte), and deep nesting needs many brackets
    escaped = b"\\u" in body or b"\\\x00" in body
    if escaped or body.count(b"[") + body.count(b"{") > limits.JSON_DEPTH:
        bad = _unstorable(data, escaped)
        if bad is not None:
            raise errors.invalid(f"Invalid body: {bad}.")
    return data


def validate(data: Any, schema: dict[str, Any], what: str) -> None:
    """400 naming the first problem when ``data`` is not valid by ``schema``."""
    if validation.conforms(data, schema):
        return
    # Cyborg's words for another count of profiles; one profile's fields are named in it
    if schema is v2.ONE_PROFILE and isinstance(data, list):
        if len(data) != 1:
            raise errors.invalid("Only one device profile allowed per POST request for now.")
        data, schema = data[0], schema["items"]
    err = jsonschema.exceptions.best_match(validation.problems(data, schema))
    if err is not None:
        raise errors.invalid(_schema_error(err, what))


# Cyborg's framework reads a form body (and a POST without a content type) as query
# arguments, which it then refuses as unknown (400); any other type is a 415. The v1 API
# (acceld's own) answers 415 for them all.
_FORM = "application/x-www-form-urlencoded"


def _not_json(req: webob.Request, content_type: str) -> None:
    what = content_type or "nothing"
    form = content_type == _FORM or (not content_type and req.method == "POST")
    if form and req.environ.get("PATH_INFO", "").startswith("/v2/"):
        raise errors.invalid(f"The body must be application/json, not {what!r}: "
                             "it was read as unknown arguments.")
    raise errors.HTTPError(415, f"The body must be application/json, not {what!r}.",
                           "acceld.media_type")


def canonical_uuid(value: str) -> str:
    """The canonical form of a UUID; anything else unchanged (its lookup is a plain 404)."""
    return uuids.canonical(value) or value


def require_uuid(value: str, field: str = "uuid") -> str:
    """The canonical form of a UUID the route needs (400, in Cyborg's words, if none)."""
    canonical = uuids.canonical(value)
    if canonical is None:
        raise errors.invalid(f"Invalid input for field/attribute {field}. Value: "
                             f"{value!r}. unable to convert to uuid")
    return canonical


def text(value: str | float) -> str:
    """A free-form value Cyborg stores as given: a number as its text (``1``, ``1.5``)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _bad_query(detail: str) -> errors.HTTPError:
    return errors.invalid(f"Invalid query: {detail}")


# a "%" not followed by two hex digits
_BAD_ESCAPE = re.compile("%(?![0-9A-Fa-f]{2})")


def query(req: webob.Request, schema: dict[str, Any]) -> dict[str, str]:
    """The query parameters (each at most once, at most ``limits.QUERY_FIELDS``, in
    percent-encoded UTF-8 with no NUL), valid by ``schema``; 400 otherwise."""
    given = req.environ.get("QUERY_STRING")
    if not given and validation.conforms({}, schema):
        return {}
    params: dict[str, str] = {}
    if given:
        bad = _BAD_ESCAPE.search(given)
        if bad is not None:
            raise _bad_query(f"malformed percent-encoding at "
                             f"{limits.prefix(given[bad.start():], 12)}.")
        try:
            # percent-escapes decoded as latin-1 code points, then read as UTF-8 (_utf8)
            pairs = urllib.parse.parse_qsl(given, keep_blank_values=True,
                                           encoding="latin-1",
                                           max_num_fields=limits.QUERY_FIELDS)
        except ValueError:
            raise _bad_query(f"more than {limits.QUERY_FIELDS} parameters.") from None
        for raw_key, raw_value in pairs:
            try:
                key, value = _utf8(raw_key), _utf8(raw_value)
            except UnicodeError:
                raise _bad_query(f"{limits.prefix(raw_key)} is not percent-encoded "
                                 "UTF-8.") from None
            if "\x00" in key or "\x00" in value:
                raise _bad_query(f"{limits.prefix(key)} holds a NUL character.")
            if key in params:
                raise errors.invalid(f"Query parameter {limits.prefix(key)} given more than once.")
            params[key] = value
    validate(params, schema, "query")
    return params


def _utf8(raw: str) -> str:
    """A request's text, handed by the server as latin-1 code points, read as UTF-8
    (UnicodeError when its bytes are not)."""
    return raw if raw.isascii() else raw.encode("latin-1").decode("utf-8")


def path_text(environ: dict[str, Any]) -> str:
    """``PATH_INFO`` as text: 400 when its bytes are not UTF-8 or hold a NUL."""
    try:
        path = _utf8(environ.get("PATH_INFO", ""))
    except UnicodeError:
        raise errors.invalid("The path is not percent-encoded UTF-8.") from None
    if "\x00" in path:
        raise errors.invalid("The path holds a NUL character.")
    return path


def _default(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return value.isoformat()
    raise TypeError(f"cannot serialize {type(value).__name__}")


_encode = jsoncodec.encoder(_default)


def json_bytes(data: Any) -> bytes:
    """``data`` as ``json.dumps(data)`` writes it, datetimes as ISO 8601 in UTC."""
    return _encode(data).encode("utf-8")


def json_response(data: Any, status: int = 200,
                  headers: dict[str, str] | None = None) -> Reply:
    return body_response(json_bytes(data), status, headers)


def link_inputs(environ: dict[str, Any]) -> tuple[Any, ...]:
    """The request values the links' public URL is made of (part of stored answers' keys)."""
    return (environ.get("wsgi.url_scheme"), environ.get("HTTP_HOST"),
            environ.get("SERVER_NAME"), environ.get("SERVER_PORT"))


def public_url(req: webob.Request) -> str:
    """What links start with: ``[api] public_endpoint``, or else the request's host URL
    (kept per :func:`link_inputs`), without a trailing slash."""
    st = state(req)
    public = st.api.public_endpoint
    if public:
        return public.rstrip("/")
    key = link_inputs(req.environ)
    url = st.public_urls.get(key)
    if url is None:
        url = req.host_url.rstrip("/")
        if len(st.public_urls) >= 64:
            st.public_urls.clear()
        st.public_urls[key] = url
    return url


def linked(req: webob.Request, resource: str, record: dict[str, Any],
           bookmark: bool = False) -> dict[str, Any]:
    """``record`` with Cyborg's links: ``<public>/accelerator/v2/<resource>/<uuid>`` (+ a
    bookmark without the v2)."""
    public, uuid = public_url(req), record["uuid"]
    links = [{"href": f"{public}/accelerator/v2/{resource}/{uuid}", "rel": "self"}]
    if bookmark:
        links.append({"href": f"{public}/accelerator/{resource}/{uuid}", "rel": "bookmark"})
    return dict(record, links=links)


def base_url(req: webob.Request) -> str:
    public = state(req).api.public_endpoint
    return (public or req.application_url).rstrip("/")
