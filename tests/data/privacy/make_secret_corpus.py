"""Writes ``secret_forms.jsonl`` beside this file: the secret corpus, generated (no real secrets).

Every value is drawn from a seeded generator in the shape its provider documents (prefix, alphabet, length)
or its CLI's manual places it (the password options of common CLIs), so the file is the same on every run:
``python tests/data/privacy/make_secret_corpus.py``. Each line: ``{"form", "intent", "command", "secrets"}``
and, for a secret split over notebook cells, ``"cells"`` (the context cells, in order). ``secrets`` are the
values that must never be stored.
"""

from __future__ import annotations

import base64
import json
import random
import string
from pathlib import Path

RNG = random.Random(60)
ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"


def draw(alphabet: str, n: int) -> str:
    """``n`` characters of ``alphabet``, with at least one upper, lower and digit where the alphabet has them."""
    while True:
        value = "".join(RNG.choice(alphabet) for _ in range(n))
        wanted = [s for s in (string.ascii_uppercase, string.ascii_lowercase, string.digits) if set(s) & set(alphabet)]
        if all(set(value) & set(s) for s in wanted):
            return value


def password(n: int = 14, symbols: str = "!#%^*_+-") -> str:
    return draw(ALNUM, n - 2) + RNG.choice(symbols) + RNG.choice(string.digits)


TOKENS = {  # provider: (documented shape, a variable a person would put it in)
    "github fine-grained PAT": (lambda: "github_pat_" + draw(ALNUM, 22) + "_" + draw(ALNUM, 59), "GH_TOKEN"),
    "github classic PAT": (lambda: "ghp_" + draw(ALNUM, 36), "GITHUB_TOKEN"),
    "github OAuth token": (lambda: "gho_" + draw(ALNUM, 36), "GH_OAUTH"),
    "github app installation token": (lambda: "ghs_" + draw(ALNUM, 36), "GH_APP"),
    "anthropic API key": (lambda: "sk-ant-api03-" + draw(ALNUM + "-_", 93) + "AA", "ANTHROPIC_API_KEY"),
    "anthropic admin key": (lambda: "sk-ant-admin01-" + draw(ALNUM + "-_", 93) + "AA", "ANTHROPIC_ADMIN"),
    "openai project key": (lambda: "sk-proj-" + draw(ALNUM + "-_", 156), "OPENAI_API_KEY"),
    "openai service account key": (lambda: "sk-svcacct-" + draw(ALNUM + "-_", 120), "OPENAI_KEY"),
    "openai legacy key": (lambda: "sk-" + draw(ALNUM, 48), "OPENAI"),
    "vault service token": (lambda: "hvs." + draw(ALNUM + "_-", 90), "VAULT_TOKEN"),
    "vault batch token": (lambda: "hvb." + draw(ALNUM + "_-", 120), "VT"),
    "hugging face token": (lambda: "hf_" + draw(ALNUM, 34), "HF"),
    "aws access key id": (lambda: "AKIA" + draw("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16), "AWS_ACCESS_KEY_ID"),
    "aws session key id": (lambda: "ASIA" + draw("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16), "KEY_ID"),
    "aws secret access key": (lambda: draw(ALNUM + "+/", 40), "AWS_SECRET_ACCESS_KEY"),
    "slack bot token": (
        lambda: f"xoxb-{draw(string.digits, 12)}-{draw(string.digits, 13)}-{draw(ALNUM, 24)}",
        "SLACK_BOT",
    ),
    "slack user token": (
        lambda: f"xoxp-{draw(string.digits, 12)}-{draw(string.digits, 12)}-{draw(ALNUM, 32)}",
        "SLACK",
    ),
    "slack app token": (
        lambda: f"xapp-1-A{draw(UPPER_DIGITS, 10)}-{draw(string.digits, 13)}-{draw(HEX, 64)}",
        "SLACK_APP",
    ),
    "stripe live secret key": (lambda: "sk_live_" + draw(ALNUM, 99), "STRIPE"),
    "stripe restricted key": (lambda: "rk_live_" + draw(ALNUM, 99), "STRIPE_RK"),
    "stripe webhook secret": (lambda: "whsec_" + draw(ALNUM, 32), "WH"),
    "gitlab PAT": (lambda: "glpat-" + draw(ALNUM + "_-", 20), "GITLAB"),
    "gitlab deploy token": (lambda: "gldt-" + draw(ALNUM + "_-", 20), "GL_DEPLOY"),
    "gitlab runner token": (lambda: "glrt-" + draw(ALNUM + "_-", 20), "RUNNER"),
    "npm token": (lambda: "npm_" + draw(ALNUM, 36), "NPM"),
    "pypi token": (lambda: "pypi-AgEIcHlwaS5vcmc" + draw(ALNUM + "_-", 120), "TWINE"),
    "google API key": (lambda: "AIza" + draw(ALNUM + "_-", 35), "GOOGLE_KEY"),
    "google OAuth client secret": (lambda: "GOCSPX-" + draw(ALNUM + "_-", 28), "GCS"),
    "google OAuth access token": (lambda: "ya29." + draw(ALNUM + "_-", 120), "GAT"),
    "digitalocean token": (lambda: "dop_v1_" + draw(HEX, 64), "DO"),
    "docker hub PAT": (lambda: "dckr_pat_" + draw(ALNUM + "_-", 27), "DH"),
    "databricks token": (lambda: "dapi" + draw("abcdefgh0123456789", 32), "DBX"),
    "doppler token": (lambda: "dp.st.prd." + draw(ALNUM, 40), "DP"),
    "grafana cloud token": (lambda: "glc_" + draw(ALNUM, 44), "GRAFANA"),
    "sentry user token": (lambda: "sntryu_" + draw(HEX, 64), "SENTRY"),
    "tailscale auth key": (lambda: f"tskey-auth-k{draw(ALNUM, 10)}CNTRL-{draw(ALNUM, 33)}", "TS"),
    "age secret key": (lambda: "AGE-SECRET-KEY-1" + draw(UPPER_DIGITS, 58), "AGE"),
    "shopify access token": (lambda: "shpat_" + draw(HEX, 32), "SHOP"),
    "linear API key": (lambda: "lin_api_" + draw(ALNUM, 40), "LINEAR"),
    "notion token": (lambda: "ntn_" + draw(ALNUM, 46), "NOTION"),
    "postman API key": (lambda: f"PMAK-{draw(HEX, 24)}-{draw(HEX, 34)}", "PM"),
    "new relic key": (lambda: "NRAK-" + draw(UPPER_DIGITS, 27), "NR"),
    "sendgrid key": (lambda: f"SG.{draw(ALNUM + '_-', 22)}.{draw(ALNUM + '_-', 43)}", "SENDGRID"),
    "twilio API key": (lambda: "SK" + draw(HEX, 32), "TWILIO"),
    "groq key": (lambda: "gsk_" + draw(ALNUM, 52), "GROQ"),
    "replicate token": (lambda: "r8_" + draw(ALNUM, 37), "REPLICATE"),
    "planetscale token": (lambda: "pscale_tkn_" + draw(ALNUM + "_", 43), "PS"),
    "JWT": (
        lambda: (
            "eyJhbGciOiJIUzI1NiJ9."
            + base64.urlsafe_b64encode(json.dumps({"sub": draw(ALNUM, 12)}).encode()).decode().rstrip("=")
            + "."
            + draw(ALNUM + "_-", 43)
        ),
        "SESSION_JWT",
    ),
}


def forms() -> list[dict]:
    out: list[dict] = []

    def add(form: str, intent: str, command: str, *secrets: str, cells: list[str] | None = None) -> None:
        entry = {"form": form, "intent": intent, "command": command, "secrets": list(secrets)}
        if cells is not None:
            entry["cells"] = cells
        out.append(entry)

    # 1. every provider's token, as a person puts it: an export, a header, an option, a bare argument
    contexts = [
        lambda v, name: (f"Set the {name.lower()} credential", f"export {name}={v}"),
        lambda v, name: ("Call the API", f'curl -sS -H "Authorization: Bearer {v}" https://api.example.com/v1/me'),
        lambda v, name: ("Run the job with the key", f"./deploy.sh --token {v} --env prod"),
    ]
    for i, (provider, (make, name)) in enumerate(TOKENS.items()):
        value = make()
        intent, command = contexts[i % len(contexts)](value, name)
        add(f"token: {provider}", intent, command, value)
        prose = make()
        add(f"token in prose: {provider}", f"Use this key for the staging box: {prose}", "make deploy", prose)
    # 2. password options of common CLIs
    cli = [
        ("sshpass -p", "sshpass -p {p} ssh ops@bastion.example.com"),
        ("sshpass -p (attached)", "sshpass -p{p} scp build.tar ops@10.0.0.5:/srv"),
        ("docker login -p", "docker login -u ci -p {p} registry.example.com"),
        ("docker login --password", "docker login --username ci --password {p} ghcr.io"),
        ("docker login --password=", "docker login --password={p} -u ci quay.io"),
        ("podman login -p", "podman login -u dev -p {p} registry.example.com"),
        ("helm registry login -p", "helm registry login registry.example.com -u ci -p {p}"),
        ("redis-cli -a", "redis-cli -h cache.internal -a {p} PING"),
        ("redis-cli --pass", "redis-cli --pass {p} -n 2 KEYS 'session:*'"),
        ("zip -P", "zip -P {p} -r backup.zip ./reports"),
        ("unzip -P", "unzip -P {p} backup.zip -d restore"),
        ("7z -p", "7z a -p{p} -mhe=on vault.7z secrets/"),
        ("htpasswd -b", "htpasswd -b /etc/nginx/.htpasswd admin {p}"),
        ("htpasswd -bc", "htpasswd -bcB .htpasswd alice {p}"),
        ("htpasswd -nb", "htpasswd -nbB bob {p}"),
        ("openssl -passin pass:", "openssl rsa -in key.pem -passin pass:{p} -out plain.pem"),
        ("openssl -passout pass:", "openssl pkcs12 -export -in cert.pem -inkey key.pem -passout pass:{p} -out c.p12"),
        ("openssl enc -k", "openssl enc -aes-256-cbc -salt -in db.sql -out db.sql.enc -k {p}"),
        ("openssl enc -pass pass:", "openssl enc -d -aes-256-cbc -in db.enc -pass pass:{p}"),
        ("mysql -p", "mysql -u root -p{p} -h db.internal shop"),
        ("mysqldump -p", "mysqldump -uadmin -p{p} --all-databases > all.sql"),
        ("mysql --password=", "mysql --user=app --password={p} -e 'SELECT 1'"),
        ("mongosh -p", "mongosh --host db -u admin -p {p} --authenticationDatabase admin"),
        ("curl -u user:pass", "curl -u deploy:{p} https://ci.example.com/job/build"),
        ("curl -uuser:pass", "curl -udeploy:{p} https://ci.example.com/api/json"),
        ("curl --user", "curl --user 'svc:{p}' https://nexus.example.com/service/rest/v1/status"),
        ("wget --password", "wget --user=ftp --password={p} ftp://files.example.com/dump.gz"),
        ("wget --http-password", "wget --http-user=bob --http-password={p} https://example.com/f"),
        ("ldapsearch -w", "ldapsearch -x -D cn=admin,dc=example,dc=com -w {p} -b dc=example,dc=com"),
        ("smbclient -U user%pass", "smbclient //fs/share -U 'corp/alice%{p}' -c ls"),
        ("sqlcmd -P", "sqlcmd -S db.internal -U sa -P {p} -Q 'SELECT @@VERSION'"),
        ("keytool -storepass", "keytool -list -keystore app.jks -storepass {p}"),
        ("plink -pw", "plink -ssh admin@10.1.1.1 -pw {p} 'show version'"),
        ("mosquitto_pub -P", "mosquitto_pub -h mqtt -u sensor -P {p} -t temp -m 21"),
        ("twine -p", "twine upload -u __token__ -p {p} dist/*"),
        ("gpg --passphrase", "gpg --batch --passphrase {p} -d backup.tar.gpg"),
        ("http -a", "http -a admin:{p} GET https://api.example.com/users"),
        ("skopeo --creds", "skopeo copy --dest-creds ci:{p} docker://a/b docker://c/d"),
        ("lftp -u user,pass", "lftp -u backup,{p} sftp://files.example.com"),
        ("az login -p", "az login --service-principal -u 0f1e2d3c -p {p} --tenant example.onmicrosoft.com"),
        ("generic --password", "pgcli --password {p} -h db postgres"),
        ("generic --api-key", "datadog-agent check --api-key={p}"),
        ("generic --client-secret", "oauth2-proxy --client-id web --client-secret {p}"),
        ("echo | docker login --password-stdin", "echo {p} | docker login -u ci --password-stdin registry.example.com"),
        ("echo | sudo -S", "echo '{p}' | sudo -S systemctl restart nginx"),
        ("echo | chpasswd", "echo 'deploy:{p}' | sudo chpasswd"),
        ("here-string --password-stdin", "docker login -u ci --password-stdin <<< '{p}' ghcr.io"),
        ("aws configure set", "aws configure set aws_secret_access_key {p} --profile prod"),
        ("npm config set _authToken", "npm config set //registry.example.com/:_authToken {p}"),
        ("git config token", "git config --global github.token {p}"),
        ("gh secret set --body", "gh secret set DEPLOY_KEY --body {p} --repo org/app"),
        ("rabbitmqadmin -p", "rabbitmqadmin -u admin -p {p} list queues"),
    ]
    for form, template in cli:
        value = password()
        add(form, "Connect with the service account", template.format(p=value), value)
    # 3. environment assignments
    for name in ("DB_PASS", "PGPASSWORD", "MYSQL_PWD", "API_SECRET", "X_TOKEN", "REDIS_PASSWORD", "app_secret_key"):
        value = password(16)
        add(f"assignment {name}=", "Run the migration", f"{name}={value} ./manage.py migrate", value)
    for name in ("X_TOKEN", "SERVICE_PASSWORD"):
        value = password(18)
        add(f"export {name}= (quoted, spaces)", "Set it for the session", f'export {name}="{value} two words"', value)
    value = password()
    add("docker run -e NAME=value", "Start postgres", f"docker run -d -e POSTGRES_PASSWORD={value} postgres:16", value)
    value = password()
    add(
        "helm --set x.password=",
        "Install the chart",
        f"helm install db bitnami/postgresql --set auth.password={value}",
        value,
    )
    value = password()
    add(
        "kubectl --from-literal",
        "Create the secret",
        f"kubectl create secret generic db --from-literal=password={value} -n prod",
        value,
    )
    value = password()
    add("java -D…password=", "Start the service", f"java -Dspring.datasource.password={value} -jar app.jar", value)
    # 4. headers
    for header in ("X-Api-Key", "X-Auth-Token", "Private-Token", "X-Vault-Token", "Api-Key"):
        value = draw(ALNUM, 32)
        add(
            f"header {header}:",
            "Query the service",
            f"curl -H '{header}: {value}' https://svc.example.com/v2/items",
            value,
        )
    value = draw(ALNUM, 40)
    add("httpie header item", "List the items", f"http GET https://api.example.com/items X-API-Key:{value}", value)
    value = base64.b64encode(f"admin:{password()}".encode()).decode()
    add("Authorization: Basic", "Fetch it", f'curl -H "Authorization: Basic {value}" https://example.com/a', value)
    value = draw(ALNUM, 48)
    add("Cookie:", "Reuse the session", f"curl -H 'Cookie: session={value}' https://app.example.com/home", value)
    # 5. URL userinfo, passwords with @ and /
    for i, symbols in enumerate(("@", "/", "@/", ":", "#!")):
        value = draw(ALNUM, 8) + symbols + draw(ALNUM, 6)
        url = [
            "git clone https://bob:{v}@github.com/org/repo.git",
            "psql postgresql://app:{v}@db.example.com:5432/shop",
            "pip install --index-url https://ci:{v}@pypi.example.com/simple pkg",
            "redis-cli -u redis://default:{v}@cache.example.com:6379",
            "mongosh 'mongodb+srv://app:{v}@c0.example.net/db'",
        ][i]
        add(f"URL userinfo with {symbols!r}", "Connect", url.format(v=value), value)
    # 6. split over lines and cells
    value = "ghp_" + draw(ALNUM, 36)
    add("line continuation before the value", "Export it", f"export GITHUB_TOKEN=\\\n{value}", value)
    value = password()
    add(
        "line continuation between flag and value",
        "Log in",
        f"docker login \\\n  -u ci \\\n  -p \\\n  {value} \\\n  registry.example.com",
        value,
    )
    value = password()
    add(
        "heredoc .netrc",
        "Write the netrc",
        f"cat > ~/.netrc <<EOF\nmachine api.example.com login ci password {value}\nEOF",
        value,
    )
    value = "sk-ant-api03-" + draw(ALNUM, 60)
    add(
        "split over two cells",
        "",
        "python train.py",
        value,
        cells=["Set the key for the run:", "export ANTHROPIC_API_KEY=\\", value[:30], value[30:]],
    )
    value = password()
    add(
        "cell ends with the flag, next cell has the value",
        "",
        "ls",
        value,
        cells=["Log in:", "docker login -u ci --password \\", f"{value} registry.example.com"],
    )
    # 7. base64 that decodes to a secret
    for secret in ("ghp_" + draw(ALNUM, 36), f"password={password()}", "sk-proj-" + draw(ALNUM, 60)):
        encoded = base64.b64encode(secret.encode()).decode().rstrip("=")
        add("base64 of a secret", "Decode the key", f"echo {encoded} | base64 -d > key.txt", encoded, secret)
    # 8. passwords in the intent text
    for template in (
        "The bastion password is {p}, log in and restart nginx",
        "log in as admin with password {p} and list the users",
        "Set the wifi password to {p} on the router",
        "db creds: app / password: {p}",
        "use pw={p} for the staging db",
    ):
        value = password()
        add("password in the intent", template.format(p=value), "ssh admin@bastion.example.com", value)
    # 9. PEM private key
    key = "\n".join(draw(ALNUM + "+/", 64) for _ in range(4))
    add(
        "PEM private key",
        "Save the deploy key",
        f"cat > id_ed25519 <<'EOF'\n-----BEGIN OPENSSH PRIVATE KEY-----\n{key}\n-----END OPENSSH PRIVATE KEY-----\nEOF",
        *key.split("\n"),
    )
    return out


if __name__ == "__main__":
    path = Path(__file__).with_name("secret_forms.jsonl")
    entries = forms()
    path.write_text("".join(json.dumps(f, ensure_ascii=False) + "\n" for f in entries))
    print(f"{path}: {len(entries)} forms")
