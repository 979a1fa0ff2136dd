"""Secrets recognised by their text alone: providers' token formats, and the forms secrets take in any text
(``NAME=value``, HTTP headers, URL userinfo, PEM blocks, a password stated in prose).

Token formats (:data:`TOKEN_FORMATS`) are the prefixes and alphabets the providers document for their
credentials; detect-secrets knows the older ones (``ghp_``, ``xoxb-``, ``sk_live_``, ``AKIA``…) and these
add what it lacks: GitHub's fine-grained ``github_pat_`` tokens, Anthropic's ``sk-ant-``, OpenAI's project
and service-account keys (``sk-proj-``, ``sk-svcacct-``, ``sk-admin-``, without the legacy ``T3BlbkFJ``
marker detect-secrets needs), HashiCorp Vault's ``hvs.``/``hvb.``/``hvr.``, Hugging Face's ``hf_``, Google's
``AIza``/``GOCSPX-``/``ya29.``, GitLab's ``glpat-`` family, npm's ``npm_``, PyPI's macaroons, Slack, Stripe,
DigitalOcean, Docker Hub, Databricks, Doppler, Grafana, Sentry, Tailscale, age, and more. Each regex
matches the whole token (its own characters only), so what is replaced is the token and nothing around it.
"""

from __future__ import annotations

import re

SECRET_WORDS = (
    r"(?:secret|password|passwd|passphrase|passcode|pass|pwd|pw|token|api[-_]?key|apikey|access[-_]?key"
    r"|secret[-_]?key|private[-_]?key|signing[-_]?key|encryption[-_]?key|master[-_]?key|auth[-_]?key"
    r"|client[-_]?secret|credentials?|creds|authtoken|session[-_]?key|psk|sig|signature)"
)
"""The words that say a value is a secret (case-insensitive), as the last part of a name."""

_NOT_SECRET_SUFFIX = re.compile(
    r"(?i)[-_.](?:file|path|dir|url|uri|endpoint|host|id|name|names|type|length|len|ttl|timeout|expiry|expires"
    r"|enabled|env|cmd|command|helper|prompt|manager|policy|stdin|hint|format|header|prefix|version|count"
    r"|size|mode|user|username)$"
)
_NAME = re.compile(rf"(?i)(?:^|[-_.:/])(?:[a-z0-9]+[-_.])*?{SECRET_WORDS}$")
_GLUED = re.compile(r"(?i)(?:password|passwd|passphrase|secret|token|apikey|accesskey|secretkey|privatekey|pwd)$")


def secret_name(name: str) -> bool:
    """Whether a variable, option or key ``name`` says its value is a secret (``DB_PASS``, ``api-key``,
    ``auth.password``, ``_authToken``; not ``PASSWORD_FILE``, ``TOKEN_URL``, ``PWD``, ``SSH_ASKPASS``)."""
    name = name.lstrip("-")
    if re.search(r"(?i)access_?key_?id$", name):
        return True
    if not name or _NOT_SECRET_SUFFIX.search(name) or name.upper() in ("PWD", "OLDPWD"):
        return False
    if re.search(r"(?i)existing[-_]?secret$", name):
        return False
    if re.search(r"(?i)askpass$|^(?:no|with|ask|prompt|use|reset|show|skip|require|change|forgot)[-_]", name):
        return False
    return bool(_NAME.search(name) or (_GLUED.search(name) and name.upper() not in ("PWD", "OLDPWD")))


def templated(value: str) -> bool:
    """A reference to a secret rather than one: ``$VAR``, ``${VAR…}``, ``$(cmd)``, ``{{ var }}``, ``%VAR%``,
    ``<PLACEHOLDER>``, ``***``, code reading one from its environment (``process.env.KEY``)."""
    if re.match(r"(?:process\.env|os\.environ|import\.meta\.env|secrets|vars|env)\.[\w.]+$", value):
        return True
    return bool(
        re.fullmatch(r"\$\w+|\$\{[^}]*\}|\$\(.*\)|`.*`|\{\{.*\}\}|%\w+%|<[\w.\- ]+>|\*+|x{3,}|\.{3}|…", value, re.S)
    )


def is_path(value: str) -> bool:
    """A file path rather than a secret: ``./x``, ``../x``, ``~/x``, ``@file``, or an absolute path of
    lowercase names (``/run/secrets/db_password``)."""
    return value.startswith(("./", "../", "~/", "@")) or bool(re.fullmatch(r"(?:/[a-z0-9_.\-]+)+/?", value))


def _format(prefix: str, body: str) -> str:
    return rf"(?<![A-Za-z0-9_\-]){prefix}{body}(?![A-Za-z0-9_\-])"


TOKEN_FORMATS: tuple[tuple[str, str], ...] = (
    # (placeholder kind, regex of the whole token) — each from the provider's documentation of its format
    ("GITHUB_TOKEN", _format(r"github_pat_", r"[A-Za-z0-9_]{40,255}")),
    ("GITHUB_TOKEN", _format(r"gh[pousr]_", r"[A-Za-z0-9]{36,251}")),
    ("ANTHROPIC_API_KEY", _format(r"sk-ant-", r"(?:api|admin|oat|ort|sid)[0-9]{2}-[A-Za-z0-9_\-]{20,}")),
    ("OPENAI_API_KEY", _format(r"sk-(?:proj|svcacct|admin|None)-", r"[A-Za-z0-9_\-]{20,}")),
    ("OPENAI_API_KEY", _format(r"sk-", r"[A-Za-z0-9]{32,}")),
    ("VAULT_TOKEN", _format(r"hv[sbr]\.", r"[A-Za-z0-9_\-]{20,}")),
    ("HUGGING_FACE_TOKEN", _format(r"(?:hf_|api_org_)", r"[A-Za-z0-9]{30,}")),
    ("AWS_ACCESS_KEY", _format(r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)", r"[A-Z2-7]{16}")),
    ("GOOGLE_API_KEY", _format(r"AIza", r"[A-Za-z0-9_\-]{35}")),
    ("GOOGLE_OAUTH_SECRET", _format(r"GOCSPX-", r"[A-Za-z0-9_\-]{24,}")),
    ("GOOGLE_OAUTH_TOKEN", _format(r"ya29\.", r"[A-Za-z0-9_\-]{20,}")),
    ("GOOGLE_OAUTH_TOKEN", _format(r"1//0", r"[A-Za-z0-9_\-]{30,}")),
    ("GITLAB_TOKEN", _format(r"gl(?:pat|dt|rt|ptt|cbt|soat|oas|ft|imt|agent|ffct|wt|cdt)-", r"[A-Za-z0-9_\-]{20,}")),
    ("GITLAB_TOKEN", _format(r"GR1348941", r"[A-Za-z0-9_\-]{20,}")),
    ("NPM_TOKEN", _format(r"npm_", r"[A-Za-z0-9]{36}")),
    ("PYPI_TOKEN", _format(r"pypi-", r"AgE[A-Za-z0-9_\-]{50,}")),
    ("SLACK_TOKEN", _format(r"xox[abposre]-", r"[A-Za-z0-9\-]{10,}")),
    ("SLACK_TOKEN", _format(r"xapp-", r"[0-9]-[A-Za-z0-9\-]{10,}")),
    ("SLACK_WEBHOOK", r"(?<=hooks\.slack\.com/services/)T[A-Z0-9]{8,}/B[A-Z0-9]{8,}/[A-Za-z0-9]{20,}"),
    ("STRIPE_KEY", _format(r"(?:sk|rk)_(?:live|test)_", r"[A-Za-z0-9]{20,}")),
    ("STRIPE_KEY", _format(r"whsec_", r"[A-Za-z0-9]{24,}")),
    ("DIGITALOCEAN_TOKEN", _format(r"do[opr]_v1_", r"[a-f0-9]{64}")),
    ("DOCKER_HUB_TOKEN", _format(r"dckr_pat_", r"[A-Za-z0-9_\-]{20,}")),
    ("DATABRICKS_TOKEN", _format(r"dapi", r"[a-h0-9]{32}(?:-[0-9]+)?")),
    ("DOPPLER_TOKEN", _format(r"dp\.(?:pt|st|ct|sa|scim|audit)\.", r"(?:[a-z0-9_\-]+\.)?[A-Za-z0-9]{40,}")),
    ("GRAFANA_TOKEN", _format(r"(?:glc_|glsa_)", r"[A-Za-z0-9_+/]{32,}={0,2}")),
    ("SENTRY_TOKEN", _format(r"sntry[su]_", r"[A-Za-z0-9_+/=]{40,}")),
    ("TAILSCALE_KEY", _format(r"tskey-(?:auth|api|client|scim|webhook)-", r"[A-Za-z0-9\-]{20,}")),
    ("AGE_SECRET_KEY", _format(r"AGE-SECRET-KEY-1", r"[0-9A-Z]{58}")),
    ("SHOPIFY_TOKEN", _format(r"shp(?:at|ca|pa|ss)_", r"[a-fA-F0-9]{32}")),
    ("LINEAR_API_KEY", _format(r"lin_api_", r"[A-Za-z0-9]{40}")),
    ("NOTION_TOKEN", _format(r"(?:secret_|ntn_)", r"[A-Za-z0-9]{43,}")),
    ("POSTMAN_API_KEY", _format(r"PMAK-", r"[a-f0-9]{24}-[a-f0-9]{34}")),
    ("ATLASSIAN_TOKEN", _format(r"ATATT3", r"[A-Za-z0-9_\-=]{30,}")),
    ("NEW_RELIC_KEY", _format(r"NR(?:AK|II|JS|RA)-", r"[A-Z0-9]{27}")),
    ("SUPABASE_TOKEN", _format(r"sbp_", r"[a-f0-9]{40}")),
    ("PULUMI_TOKEN", _format(r"pul-", r"[a-f0-9]{40}")),
    ("HEROKU_API_KEY", _format(r"HRKU-", r"[A-Za-z0-9_\-]{30,}")),
    ("TERRAFORM_TOKEN", r"(?<![A-Za-z0-9])[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_\-]{60,}"),
    ("REPLICATE_TOKEN", _format(r"r8_", r"[A-Za-z0-9]{37}")),
    ("GROQ_API_KEY", _format(r"gsk_", r"[A-Za-z0-9]{48,}")),
    ("XAI_API_KEY", _format(r"xai-", r"[A-Za-z0-9]{60,}")),
    ("PERPLEXITY_API_KEY", _format(r"pplx-", r"[A-Za-z0-9]{40,}")),
    ("SENDGRID_API_KEY", _format(r"SG\.", r"[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}")),
    ("MAILGUN_API_KEY", _format(r"key-", r"[0-9a-zA-Z]{32}")),
    ("TWILIO_API_KEY", _format(r"SK", r"[0-9a-fA-F]{32}")),
    ("PLANETSCALE_TOKEN", _format(r"pscale_(?:tkn|pw|oauth)_", r"[A-Za-z0-9_\-=.]{32,}")),
    ("ONEPASSWORD_TOKEN", _format(r"ops_", r"eyJ[A-Za-z0-9_\-]{40,}")),
)
"""``(placeholder kind, regex)``: the providers' documented token formats (see the module docstring)."""

TEXT_PATTERNS: tuple[tuple[str | None, str], ...] = (
    # (placeholder kind, or None: the "name" group names it; the regex, whose "secret" group is replaced)
    (
        None,
        r"(?i)(?<![\w.\-/])(?P<name>[A-Za-z0-9_.\-]*" + SECRET_WORDS + r")\s*(?:=|:=|=>|:(?=\s*[\"']))\s*"
        r"(?P<q>[\"'])?(?P<secret>(?(q)[^\"'\n]+|[^\s\"'`;|&,)]+))",
    ),
    (
        "BEARER_TOKEN",
        r"(?i)(?<![\w-])(?:proxy-)?authorization\s*:\s*(?:bearer|token|basic|digest|apikey|key|sso-key|bot|otp"
        r"|negotiate|ntlm)?\s*(?P<secret>[^\s\"'\\]+)",
    ),
    (
        "API_KEY",
        r"(?i)(?<![\w-])(?:x-[\w-]*?(?:key|token|secret|auth|signature|password|session)[\w-]*|[\w-]*api[-_]?key"
        r"|[\w-]+-token|private-token|job-token)\s*:\s*(?P<secret>[A-Za-z0-9_\-+/=.~]{8,})(?![\w(\[])",
    ),
    ("COOKIE", r"(?i)(?<![\w-])(?:cookie|set-cookie)\s*:\s*(?P<secret>[^\"'\n\\]+?)(?=\s*(?:[\"'\n\\]|$))"),
    (
        "PASSWORD",
        r"(?i)\b(?:password|passwd|passphrase|passcode|pw|token|api key|secret)\s*(?:is|was|:|=|->)\s*"
        r"[\"'`]?(?P<secret>(?!(?:correct|wrong|invalid|incorrect|expired|required|set|empty|blank|missing|valid"
        r"|strong|weak|changed|reset|stored|saved|needed|not|being|still|too|also|now|there|here|the|a|an|in|on"
        r"|at|from|for|of|to|and|or|same|different|ok|fine|unknown|none|null|stale)\b)[^\s\"'`]{4,})",
    ),
    (
        "PASSWORD",
        r"(?i)\b(?:with|using|use|via|and)\s+(?:the\s+)?(?:password|passwd|passphrase|pass|pw)\s+[\"'`]?"
        r"(?P<secret>(?!(?:from|in|the|a|an|of|for|to|file|prompt|stdin|manager|auth|authentication|login|reset"
        r"|option|flag|policy|that|which|you|i|we|it|is)\b)[^\s\"'`,.;]{4,})",
    ),
    (
        "PASSWORD",
        r"(?i)\b(?:set|change|reset|update)\s+(?:the\s+|my\s+|his\s+|her\s+|their\s+)?(?:\w+\s+)?"
        r"(?:password|passwd|passphrase)\s+to\s+[\"'`]?(?P<secret>(?!(?:the|a|an|its|their|default|something"
        r"|blank|empty|none|expire|never|be)\b)[^\s\"'`,;]{4,})",
    ),
    ("PASSWORD", r"(?i)\bmachine\s+\S+\s+login\s+\S+\s+password\s+(?P<secret>\S+)"),  # .netrc
    (
        "PRIVATE_KEY",
        r"(?s)(?P<secret>-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
        r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----)",
    ),
)
"""Secrets in any text, by the form they take there (see the module docstring)."""

_SCHEME = re.compile(r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{0,31}://")
"""A URL's scheme (RFC 3986: a letter, then letters, digits, ``+.-``), at most 32 characters and not inside a
longer run of them: each start is tried once in O(1), so a megabyte-long word costs linear time (an unbounded
``[A-Za-z0-9+.-]*://`` backtracked over the whole run from every start: quadratic, hours for a 3.5 MB line)."""
_HOST = re.compile(
    r"(?:localhost|\[[0-9A-Fa-f:.]+\]|[0-9]{1,3}(?:\.[0-9]{1,3}){3}|(?:[A-Za-z0-9\-]+\.)+[A-Za-z]{2,}|[A-Za-z0-9\-_]+)"
    r"(?::[0-9]{1,5})?(?=[/?#\s\"'`)\]]|$)"
)
_DOTTED = re.compile(r"localhost|\[|[0-9.]+$|.*\.[A-Za-z]{2,}$")


def url_passwords(text: str) -> list[tuple[int, int]]:
    """Spans of the passwords in the ``scheme://user:password@host`` URLs of ``text``. A password may hold
    ``@`` and ``/`` (unencoded, as people type them): the userinfo ends at the first ``@`` followed by a
    host (a dotted name, an address, ``localhost``) and then the end of the authority."""
    spans = []
    for scheme in _SCHEME.finditer(text):
        start = scheme.end()
        stop = start
        while stop < len(text) and not text[stop].isspace() and text[stop] not in "\"'`<>":
            stop += 1
        authority = text[start:stop]
        colon = authority.find(":")
        if colon < 0 or "/" in authority[:colon] or "@" in authority[:colon]:
            continue
        if re.match(r"[0-9]{1,5}(?:/|$)", authority[colon + 1 :]) and "@" not in authority.split("/", 1)[0]:
            continue  # host:port/path
        at = authority.find("@", colon)
        while at >= 0:
            host = _HOST.match(authority, at + 1)
            if host is not None and _DOTTED.match(host.group(0).split(":")[0]):
                break
            at = authority.find("@", at + 1)
        if at < 0:  # no dotted host (user:password@db): the last @ before any /
            head = authority[: authority.find("/", colon)] if "/" in authority[colon:] else authority
            at = head.rfind("@")
            if at < colon:
                continue
        if at > colon + 1:
            spans.append((start + colon + 1, start + at))
    return spans
