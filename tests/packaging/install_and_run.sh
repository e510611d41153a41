#!/usr/bin/env bash
# The body of package_test (tests/packaging/package_test.sh), run as root in the throwaway
# root or on the machine itself:
#
#   install_and_run.sh WORK_DIR LOG_DIR DET_MASTER_DEB DET_AGENT_DEB DET_CLI_DEB EXPERIMENT_YAML
#
#  1. dpkg -i the three packages; check the system user, /var/lib/det (0700, det), the
#     conffiles, the cluster secret, the units, that every installed program finds its
#     libraries, and that the installed Python package imports;
#  2. start /usr/bin/det-master and /usr/bin/det-agent as user det, with the environment
#     systemd gives them (det.env, no LD_LIBRARY_PATH) and the installed configs, changed
#     only where the test must: loopback port 0 instead of 8080/8081, CPU slots;
#  3. run EXPERIMENT_YAML (the example), 100 batches long, with the installed `det` to
#     COMPLETED;
#  4. dpkg --remove: programs gone, /var/lib/det and the conffiles kept;
#     dpkg --purge: /var/lib/det, /etc/det and the packages' records gone.
# Whatever happens, the daemons are stopped and the packages purged on exit.
set -euo pipefail

(($# == 6)) || { echo "usage: install_and_run.sh WORK_DIR LOG_DIR MASTER_DEB AGENT_DEB CLI_DEB EXPERIMENT_YAML" >&2; exit 2; }
w=$1 logs=$2 master_deb=$3 agent_deb=$4 cli_deb=$5 experiment=$6
packages=(det-cli det-agent det-master)
# The environment systemd gives a unit with User=det (and the units' EnvironmentFile).
service_env=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
             LANG=C.UTF-8 HOME=/var/lib/det USER=det LOGNAME=det)
master_pid="" agent_pid="" installed=0

step() { echo "== $(date -u +%T) $*"; }
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# wait_for SECONDS WHAT COMMAND...: runs COMMAND until it succeeds; fails naming WHAT after
# SECONDS. COMMAND's output is shown: conditions keep quiet while they are not met.
wait_for() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    ((SECONDS < deadline)) || fail "no $what after ${seconds}s"
    sleep 0.2
  done
}

# stop_daemon PID NAME: SIGTERM, then SIGKILL after 30 s; returns the daemon's exit code.
stop_daemon() {
  local pid=$1 name=$2
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "$name did not stop within 30s of SIGTERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  local rc=0
  wait "$pid" || rc=$?
  return "$rc"
}

cleanup() {
  local rc=$?
  set +e
  [[ -n "$agent_pid" ]] && stop_daemon "$agent_pid" det-agent
  [[ -n "$master_pid" ]] && stop_daemon "$master_pid" det-master
  if ((installed)); then
    echo "== purging the packages (cleanup)"
    dpkg --purge "${packages[@]}" >>"$logs/dpkg.log" 2>&1 ||
      echo "dpkg --purge ${packages[*]} failed: see $logs/dpkg.log" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT

# status PACKAGE: dpkg's two-letter state ("ii" installed, "rc" configuration left), or "".
status() { dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null | cut -c1-2 || true; }

# mode_owner PATH: "MODE USER GROUP".
mode_owner() { stat -c '%a %U %G' "$1"; }

expect_eq() {
  [[ "$2" == "$3" ]] || fail "$1: expected \"$3\", got \"$2\""
}

show_log_on_failure() {
  echo "--- $1 (last 40 lines)" >&2
  tail -n 40 "$1" >&2 || true
}

step "preconditions"
for p in "${packages[@]}"; do
  [[ -z "$(status "$p")" || "$(status "$p")" == un ]] ||
    fail "$p is already on this machine ($(status "$p")); the test would remove it"
done
for path in /var/lib/det /etc/det; do
  [[ ! -e "$path" ]] || fail "$path exists already; the test would delete it on purge"
done
[[ -d /usr/share/datasets/fashion-mnist ]] ||
  fail "/usr/share/datasets/fashion-mnist is missing (dataset-fashion-mnist; deploy/setup.sh)"

step "dpkg -i $(basename "$master_deb") $(basename "$agent_deb") $(basename "$cli_deb")"
installed=1
if ! dpkg -i "$master_deb" "$agent_deb" "$cli_deb" >"$logs/dpkg.log" 2>&1; then
  cat "$logs/dpkg.log" >&2
  fail "dpkg -i failed (output above)"
fi
for p in "${packages[@]}"; do expect_eq "dpkg status of $p" "$(status "$p")" ii; done

step "checking the installation"
version=$(dpkg-query -W -f='${Version}' det-master)
expect_eq "det-master --version" "$(/usr/bin/det-master --version)" "det-master $version"
uid=$(id -u det) || fail "no user det after installing"
((uid < 1000)) || fail "user det has uid $uid: not a system user"
expect_eq "login shell of det" "$(getent passwd det | cut -d: -f7)" /usr/sbin/nologin
for dir in /var/lib/det /var/lib/det/master /var/lib/det/agent; do
  expect_eq "mode and owner of $dir" "$(mode_owner "$dir")" "700 det det"
done
expect_eq "mode and owner of /etc/det/det.env" "$(mode_owner /etc/det/det.env)" "600 root root"
grep -qxE 'DET_CLUSTER_SECRET=[0-9a-f]{48}' /etc/det/det.env ||
  fail "/etc/det/det.env has no generated DET_CLUSTER_SECRET"
for pair in det-master:/etc/det/master.yaml det-agent:/etc/det/agent.yaml; do
  dpkg-query -W -f='${Conffiles}\n' "${pair%%:*}" | grep -q " ${pair#*:} " ||
    fail "${pair#*:} is not a conffile of ${pair%%:*}"
done
for d in master agent; do
  grep -qx "ExecStart=/usr/bin/det-$d --config /etc/det/$d.yaml" \
    "/lib/systemd/system/det-$d.service" || fail "det-$d.service does not run /usr/bin/det-$d"
done
grep -qx 'python_path: \[/usr/lib/det/python\].*' /etc/det/agent.yaml ||
  fail "/etc/det/agent.yaml does not point python_path at /usr/lib/det/python"
if dpkg-query -W -f='${Depends}' det-agent det-master det-cli | grep -qi cuda; then
  fail "a package depends on CUDA: $(dpkg-query -W -f='${Package}: ${Depends}\n' "${packages[@]}")"
fi
for b in det det-master det-agent det-fashion-mnist; do
  missing=$("${service_env[@]}" ldd "/usr/bin/$b" | grep 'not found' || true)
  [[ -z "$missing" ]] || fail "/usr/bin/$b: libraries not found: $missing"
done
"${service_env[@]}" PYTHONPATH=/usr/lib/det/python setpriv --reuid=det --regid=det \
  --init-groups /usr/bin/python3 -c 'import det, det.core' ||
  fail "the installed Python package does not import as user det"

step "starting /usr/bin/det-master (installed config, loopback port 0)"
mkdir -p "$w/run" "$w/home"
chmod 0755 "$w"
chown det:det "$w/run"
chmod 0700 "$w/home"
# The installed configs, changed only where the test must (port 0: no clash with anything).
sed -E -e 's|^grpc_listen:.*|grpc_listen: "127.0.0.1:0"|' \
  -e 's|^http_listen:.*|http_listen: "127.0.0.1:0"|' /etc/det/master.yaml >"$w/master.yaml"
echo "address_file: $w/run/master.address" >>"$w/master.yaml"
grep -qx 'grpc_listen: "127.0.0.1:0"' "$w/master.yaml" || fail "master.yaml has no grpc_listen"
grep -qx 'data_dir: /var/lib/det/master' "$w/master.yaml" ||
  fail "the installed master.yaml does not keep its data in /var/lib/det/master"
chmod 0644 "$w/master.yaml"
mapfile -t secret_env < <(grep -E '^[A-Z_]+=' /etc/det/det.env)
admin_password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
"${service_env[@]}" "${secret_env[@]}" DET_ADMIN_PASSWORD="$admin_password" \
  setpriv --reuid=det --regid=det --init-groups \
  /usr/bin/det-master --config "$w/master.yaml" >"$logs/det-master.log" 2>&1 &
master_pid=$!
master_up() {
  kill -0 "$master_pid" 2>/dev/null || { show_log_on_failure "$logs/det-master.log"; fail "det-master exited"; }
  [[ -s "$w/run/master.address" ]]
}
wait_for 30 "address from det-master ($logs/det-master.log)" master_up
master=$(cat "$w/run/master.address")
echo "master at $master"
[[ -e /var/lib/det/master/det.db ]] || fail "no database in /var/lib/det/master"

step "starting /usr/bin/det-agent (installed config, CPU slot)"
sed -E -e "s|^master:.*|master: \"$master\"|" -e 's|^slot_type:.*|slot_type: cpu|' \
  /etc/det/agent.yaml >"$w/agent.yaml"
echo "agent_id: package-test-agent" >>"$w/agent.yaml"
grep -qx "master: \"$master\"" "$w/agent.yaml" || fail "agent.yaml has no master"
chmod 0644 "$w/agent.yaml"
"${service_env[@]}" "${secret_env[@]}" setpriv --reuid=det --regid=det --init-groups \
  /usr/bin/det-agent --config "$w/agent.yaml" >"$logs/det-agent.log" 2>&1 &
agent_pid=$!

det_cli() { env HOME="$w/home" /usr/bin/det -m "$master" "$@"; }
DET_PASSWORD=$admin_password det_cli user login admin >/dev/null ||
  fail "det user login admin failed"
agent_registered() {
  kill -0 "$agent_pid" 2>/dev/null || { show_log_on_failure "$logs/det-agent.log"; fail "det-agent exited"; }
  det_cli agent list --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
sys.exit(0 if any(a.get("id") == "package-test-agent" for a in json.load(sys.stdin).get("agents", [])) else 1)' 2>/dev/null
}
wait_for 30 "registered agent package-test-agent ($logs/det-agent.log)" agent_registered

step "det experiment create $(basename "$experiment") (100 batches) --follow"
mkdir -p "$w/checkpoints"
chown det:det "$w/checkpoints"
if ! timeout 150 env HOME="$w/home" /usr/bin/det -m "$master" experiment create "$experiment" \
    --config 'searcher.max_length={batches: 100}' \
    --config 'min_validation_period={batches: 50}' \
    --config "checkpoint_storage={type: shared_fs, host_path: '$w/checkpoints'}" \
    --follow >"$logs/experiment.log" 2>&1; then
  show_log_on_failure "$logs/experiment.log"
  show_log_on_failure "$logs/det-agent.log"
  fail "det experiment create --follow failed or took over 150s"
fi
id=$(det_cli experiment list --json |
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["experiments"][-1]["id"])')
det_cli experiment describe "$id" --json >"$logs/experiment.json"
/usr/bin/python3 - "$logs/experiment.json" <<'PY' || fail "experiment $id did not complete"
import json, sys
d = json.load(open(sys.argv[1]))
state = d["experiment"]["state"]
trial = d["trials"][0]
print(f"experiment {d['experiment']['id']}: {state}; trial {trial['id']}: {trial['state']}, "
      f"{trial.get('total_batches')} batches, validation {trial.get('validation_summary')}")
sys.exit(0 if state == "STATE_COMPLETED" and trial["state"] == "STATE_COMPLETED"
         and int(trial.get("total_batches", 0)) == 100 else 1)
PY

step "stopping the daemons (SIGTERM)"
rc=0
stop_daemon "$agent_pid" det-agent || rc=$?
agent_pid=""
expect_eq "det-agent's exit code after SIGTERM" "$rc" 0
rc=0
stop_daemon "$master_pid" det-master || rc=$?
master_pid=""
expect_eq "det-master's exit code after SIGTERM" "$rc" 0

step "dpkg --remove ${packages[*]}"
dpkg --remove "${packages[@]}" >>"$logs/dpkg.log" 2>&1 || fail "dpkg --remove failed ($logs/dpkg.log)"
# The daemon packages keep their conffiles (state rc); det-cli has none and is gone.
for p in det-master det-agent; do expect_eq "dpkg status of $p after remove" "$(status "$p")" rc; done
[[ -z "$(status det-cli)" || "$(status det-cli)" == un ]] ||
  fail "dpkg still knows det-cli after remove ($(status det-cli))"
for b in det det-master det-agent det-fashion-mnist; do
  [[ ! -e "/usr/bin/$b" ]] || fail "/usr/bin/$b is still there after dpkg --remove"
done
[[ ! -e /usr/lib/det ]] || fail "/usr/lib/det is still there after dpkg --remove"
[[ -s /var/lib/det/master/det.db ]] || fail "dpkg --remove deleted the master's database"
expect_eq "mode and owner of /var/lib/det after remove" "$(mode_owner /var/lib/det)" "700 det det"
for f in /etc/det/master.yaml /etc/det/agent.yaml /etc/det/det.env; do
  [[ -e "$f" ]] || fail "dpkg --remove deleted $f"
done

step "dpkg --purge ${packages[*]}"
dpkg --purge "${packages[@]}" >>"$logs/dpkg.log" 2>&1 || fail "dpkg --purge failed ($logs/dpkg.log)"
installed=0
for p in "${packages[@]}"; do
  [[ -z "$(status "$p")" || "$(status "$p")" == un ]] ||
    fail "dpkg still knows $p after purge ($(status "$p"))"
done
for path in /var/lib/det /etc/det; do
  [[ ! -e "$path" ]] || fail "$path is still there after dpkg --purge: $(ls -la "$path")"
done
step "done"
