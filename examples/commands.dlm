---
dlm_id: 01JCMDSDEM0000000000000000
dlm_version: 15
base_model: smollm2-135m-instruct
---
# Shell commands

Tasks from the example logs' kind of work, each answered by the one command that does it.
Each pair is a `!probe`: `learnerd eval` checks that the adapter answers it exactly.

::instruction::
### Q !probe
List the pods in the dev namespace

### A
kubectl get pods -n dev

### Q !probe
Follow the logs of the api deployment in dev

### A
kubectl logs -f deploy/api -n dev

### Q !probe
Restart the api deployment in dev

### A
kubectl rollout restart deployment/api -n dev

### Q !probe
Show which node each pod in dev runs on

### A
kubectl get pods -o wide -n dev

### Q !probe
Find the merge base of HEAD and origin/main

### A
git merge-base HEAD origin/main

### Q !probe
Show my unpushed commits, one line each

### A
git log --oneline origin/main..HEAD

### Q !probe
Undo the last commit but keep its changes staged

### A
git reset --soft HEAD~1

### Q !probe
Show free disk space in human units

### A
df -h

### Q !probe
Delete journal entries older than two weeks

### A
sudo journalctl --vacuum-time=2weeks

### Q !probe
Remove stopped containers and dangling images

### A
docker system prune -f

### Q !probe
Which process listens on port 8080?

### A
ss -ltnp 'sport = :8080'

### Q !probe
Check the health endpoint on port 8080

### A
curl -fsS http://localhost:8080/healthz

### Q !probe
Run only the retry tests and stop at the first failure

### A
pytest -x -k retry

### Q !probe
Follow the nginx error log

### A
tail -F /var/log/nginx/error.log

### Q !probe
Count the lines of main.py

### A
wc -l main.py

### Q !probe
Show the ten largest files under /var/log

### A
du -ah /var/log | sort -rh | head -n 10

### Q !probe
Print the current git branch

### A
git rev-parse --abbrev-ref HEAD

### Q !probe
List the listening TCP sockets

### A
ss -ltn

### Q !probe
Show the kernel version

### A
uname -r

### Q !probe
Compress the logs directory into logs.tar.gz

### A
tar -czf logs.tar.gz logs

