"""Secret redaction (the parsed command line, the forms of secrets in text, detect-secrets' plugins): every secret
becomes a typed placeholder, nothing else changes, and redacting twice changes nothing more; the secret corpus and
the benign commands' rates (printed)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from learnerd.privacy.redact import CACHED_CHARS, Redactor
from learnerd.privacy.settings import PrivacyConfig
from tests.support.privacy_corpora import lines, rate, secret_forms

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor()


@pytest.mark.parametrize(
    ("text", "secret", "redacted"),
    [
        (
            f"export AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
            AWS_SECRET,
            "export AWS_SECRET_ACCESS_KEY=<AWS_SECRET_ACCESS_KEY>",
        ),
        (
            "export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE",
            "AKIAIOSFODNN7EXAMPLE",
            "export AWS_ACCESS_KEY_ID=<AWS_ACCESS_KEY_ID>",
        ),
        (
            f'curl -H "Authorization: Bearer {JWT}" https://api',
            JWT,
            'curl -H "Authorization: Bearer <BEARER_TOKEN>" https://api',
        ),
        ("mysql -u root -pHunter2Secret!", "Hunter2Secret!", "mysql -u root -p<MYSQL_PASSWORD>"),
        (
            "curl -u user:password https://example.com",
            "password",
            "curl -u user:<BASIC_AUTH_PASSWORD> https://example.com",
        ),
        (
            "git clone https://bob:s3cr3tPass@github.com/x/y",
            "s3cr3tPass",
            "git clone https://bob:<BASIC_AUTH_CREDENTIALS>@github.com/x/y",
        ),
        ("docker run -e DB_PASSWORD=Sup3rS3cret! app", "Sup3rS3cret!", "docker run -e DB_PASSWORD=<DB_PASSWORD> app"),
        ("psql --password=pg-pass-123 -h db", "pg-pass-123", "psql --password=<PASSWORD> -h db"),
        (f"token = {JWT[:20]}… and {JWT}", JWT, None),  # a JWT found by detect-secrets, widened to the whole token
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
            "MIIEpAIBAAKCAQEA",
            "<PRIVATE_KEY>",
        ),
    ],
)
def test_a_secret_becomes_its_placeholder(redactor: Redactor, text: str, secret: str, redacted: str | None) -> None:
    result = redactor.redact(text)
    assert secret not in result.text
    if redacted is not None:
        assert result.text == redacted
    assert sum(result.kinds.values()) >= 1
    assert redactor.redact(result.text).text == result.text, "idempotent"


@pytest.mark.parametrize(
    "text",
    [
        "kubectl get pods -n dev",
        "echo $GITHUB_TOKEN",
        "export TOKEN=${GITHUB_TOKEN}",
        "tar -czf backup.tar.gz ./data",
        "ssh-keygen -t ed25519 -C me@example.com",
        "git log --oneline -n 5",
        "List the pods in the dev namespace",
    ],
)
def test_ordinary_commands_and_references_are_untouched(redactor: Redactor, text: str) -> None:
    result = redactor.redact(text)
    assert result.text == text and not result.kinds


def test_the_allow_list_and_extra_patterns_are_applied() -> None:
    cfg = PrivacyConfig(allow=["AKIAIOSFODNN7EXAMPLE"], extra_patterns=[r"ticket-(?P<secret>\d{6})"])
    redactor = Redactor(cfg)
    assert redactor.redact("aws --key AKIAIOSFODNN7EXAMPLE").text == "aws --key AKIAIOSFODNN7EXAMPLE"
    assert redactor.redact("open ticket-123456 now").text == "open ticket-<SECRET> now"


def test_only_the_configured_plugins_run() -> None:
    text = "login --key 'Z2hvc3QtdG93bi1yb2Fkcw' # basic_auth"
    assert Redactor(PrivacyConfig(plugins=[])).redact(text).text == text, "a quoted string is judged by the plugins"
    limited = Redactor(PrivacyConfig(plugins=["Base64HighEntropyString"], base64_limit=3.0))
    assert limited.redact(text).text == "login --key '<BASE64_HIGH_ENTROPY_STRING>' # basic_auth"


def test_a_short_text_redacted_again_comes_from_the_cache_with_counts_of_its_own() -> None:
    redactor = Redactor()
    text = "export GITHUB_TOKEN=ghp_" + "x7Kq2Lm9Pw4Rt6Yv8Zb1Nc3Df5Gh7Jk9Ls0Qa"
    first = redactor.redact(text)
    first.kinds["GITHUB_TOKEN"] += 100  # a caller's changes to its counts reach no later caller
    again = redactor.redact(text)
    assert again.text == "export GITHUB_TOKEN=<GITHUB_TOKEN>" and again.kinds == {"GITHUB_TOKEN": 1}
    assert redactor._cached.cache_info().hits == 1
    long_text = text + " " + "a" * CACHED_CHARS
    assert redactor.redact(long_text).text.startswith("export GITHUB_TOKEN=<GITHUB_TOKEN> ")
    assert redactor._cached.cache_info().currsize == 1, "a text longer than CACHED_CHARS is not kept"


def test_a_string_holding_json_is_redacted_decoded_and_stays_json(redactor: Redactor) -> None:
    # A Codex call's arguments: redacting the encoded text would cut through its escaped quotes.
    command = f'curl -H "Authorization: Bearer {JWT}" https://api'
    record = {"arguments": json.dumps({"cmd": command, "workdir": "/srv"})}
    kinds: Counter[str] = Counter()
    out = redactor.redact_json(record, kinds)
    assert json.loads(out["arguments"]) == {
        "cmd": 'curl -H "Authorization: Bearer <BEARER_TOKEN>" https://api',
        "workdir": "/srv",
    }
    assert JWT not in out["arguments"] and kinds == Counter({"BEARER_TOKEN": 1})


def test_a_secret_seen_only_in_the_encoded_json_is_still_redacted(redactor: Redactor) -> None:
    # {"password": "..."}: the key names the value a secret; decoded, the value alone looks like nothing.
    text = json.dumps({"password": "Hunter2Secret!x"})
    out = redactor.redact_json({"arguments": text}, Counter())
    assert "Hunter2Secret!x" not in out["arguments"]


def test_the_secret_corpus_is_redacted_and_benign_commands_are_unchanged(redactor: Redactor) -> None:
    forms, benign = secret_forms(), lines("benign_commands.txt")
    assert len(forms) >= 150 and len(benign) >= 100
    leaked = []
    for form in forms:
        cells = redactor.redact_json([{"kind": "markup", "text": t} for t in form.context])
        stored = "\n".join(
            [*(c["text"] for c in cells), redactor.redact(form.intent).text, redactor.redact(form.command).text]
        )
        if any(secret in stored for secret in form.secrets):
            leaked.append(form.form)
    changed = {c: redactor.redact(c).text for c in benign if redactor.redact(c).text != c}
    caught, unchanged = rate(len(forms) - len(leaked), len(forms)), rate(len(benign) - len(changed), len(benign))
    print(f"\nsecret forms redacted: {caught}; benign commands unchanged: {unchanged}")
    assert len(leaked) <= 0.02 * len(forms), f"redacted {caught}; leaked: {leaked}"
    assert len(changed) <= 0.02 * len(benign), f"unchanged {unchanged}; changed: {changed}"


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        (  # a 1-character password: only its own character goes, not every token holding a "p"
            "curl https://u:p@host.example.com/api/upload -o payload.bin",
            "curl https://u:<BASIC_AUTH_CREDENTIALS>@host.example.com/api/upload -o payload.bin",
        ),
        (
            "git clone https://bob:p@ss/w0rd@github.com/org/repo.git && cd repo",
            "git clone https://bob:<BASIC_AUTH_CREDENTIALS>@github.com/org/repo.git && cd repo",
        ),
        ("sshpass -p 'Tr0ub4dor&3' ssh ops@bastion", "sshpass -p '<PASSWORD>' ssh ops@bastion"),
        ("mysql -uroot -pS3cr3t!x shop -e 'SELECT 1'", "mysql -uroot -p<MYSQL_PASSWORD> shop -e 'SELECT 1'"),
        ('export X_TOKEN="two words"; make', 'export X_TOKEN="<X_TOKEN>"; make'),
        ("openssl rsa -passin pass:hunter2x -in k.pem", "openssl rsa -passin pass:<PASSWORD> -in k.pem"),
    ],
)
def test_only_the_secrets_own_characters_are_replaced(redactor: Redactor, text: str, redacted: str) -> None:
    assert redactor.redact(text).text == redacted


def test_a_secret_split_over_two_cells_is_replaced_in_both(redactor: Redactor) -> None:
    token = "ghp_" + "x7Kq2Lm9Pw4Rt6Yv8Zb1Nc3Df5Gh7Jk9Ls0Qa"
    cells = [{"kind": "code", "text": "export GITHUB_TOKEN=" + token[:12]}, {"kind": "code", "text": token[12:]}]
    out = redactor.redact_json({"cells": cells})["cells"]
    assert all(token[:12] not in c["text"] and token[12:] not in c["text"] for c in out), out
