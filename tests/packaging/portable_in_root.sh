# The body of portable_test (tests/packaging/portable_test.sh), run by busybox sh as root
# in the empty root (new mount, PID and network namespaces):
#
#   portable_in_root.sh TARBALL EXPERIMENT_YAML
#
#  1. the root has no /lib, /lib64 or /usr; busybox makes its applets, /proc is mounted,
#     loopback brought up;
#  2. the tarball unpacks; install.sh puts it into /srv/moved (the interpreter of every
#     program rewritten: they run before /opt/det exists) and then into /opt/det;
#  3. the example's launcher finds no CUDA here and says which libraries and directories,
#     runs with its stubs on CPU slots, and refuses with the libraries' names and the
#     directories looked in when DET_CUDA_LIB_DIR names a directory without them or the
#     worker has CUDA slots;
#  4. /opt/det/bin/det-master and det-agent run with the installed configs, changed only
#     where the test must (port 0, /tmp, CPU slot, worker_path /opt/det/bin); every library
#     mapped by either comes from /opt/det/lib;
#  5. the installed det trains EXPERIMENT_YAML (the C++ example, 100 batches) to COMPLETED;
#  6. both daemons exit 0 on SIGTERM.
# Logs: /logs (the test's undeclared outputs).
set -eu

tarball=$1 experiment=$2
logs=/logs w=/tmp/w
master_pid="" agent_pid=""

step() { echo "== $(date -u +%T) $*"; }
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
show_log() {
  echo "--- $1 (last 40 lines)" >&2
  tail -n 40 "$1" >&2 || true
}

# wait_for SECONDS WHAT COMMAND...: runs COMMAND until it succeeds; fails naming WHAT.
wait_for() {
  seconds=$1 what=$2
  shift 2
  deadline=$(($(date +%s) + seconds))
  until "$@"; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "no $what after ${seconds}s"
    sleep 0.2
  done
}

# stop_daemon PID NAME: SIGTERM, then SIGKILL after 30 s; returns the daemon's exit code.
stop_daemon() {
  kill -TERM "$1" 2>/dev/null || true
  deadline=$(($(date +%s) + 30))
  while kill -0 "$1" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.2; done
  if kill -0 "$1" 2>/dev/null; then
    echo "$2 did not stop within 30s of SIGTERM; killing it" >&2
    kill -KILL "$1" 2>/dev/null || true
  fi
  stop_rc=0
  wait "$1" || stop_rc=$?
  return "$stop_rc"
}

cleanup() {
  exit_code=$?
  set +e
  [ -n "$agent_pid" ] && stop_daemon "$agent_pid" det-agent
  [ -n "$master_pid" ] && stop_daemon "$master_pid" det-master
  exit "$exit_code"
}
trap cleanup EXIT

step "the empty root"
/bin/busybox --install -s /bin
for d in /lib /lib64 /usr /etc /opt; do
  [ ! -e "$d" ] || fail "$d exists in the empty root"
done
mount -t proc proc /proc
ip link set lo up
mkdir -p "$w"

step "unpacking $tarball; install.sh /srv/moved, then install.sh (default /opt/det)"
tar -xzf "$tarball" -C "$w"
set -- "$w"/det-*-linux-x86_64
[ $# -eq 1 ] && [ -x "$1/install.sh" ] || fail "the tarball has no det-*-linux-x86_64/install.sh"
unpacked=$1
version=$(cat "$unpacked/share/det/VERSION")
"$unpacked/install.sh" /srv/moved >"$logs/install-moved.log" 2>&1 ||
  { show_log "$logs/install-moved.log"; fail "install.sh /srv/moved failed"; }
[ ! -e /opt ] || fail "install.sh /srv/moved made /opt"
[ "$(/srv/moved/bin/det-master --version)" = "det-master $version" ] ||
  fail "/srv/moved/bin/det-master --version: $(/srv/moved/bin/det-master --version 2>&1)"
for b in det det-agent; do
  out=$(/srv/moved/bin/$b --help 2>&1 || true)
  case $out in *[Uu]sage:*) ;; *) fail "/srv/moved/bin/$b --help printed no usage: $out" ;; esac
done
/srv/moved/bin/det-fashion-mnist --cuda-libs >"$logs/cuda-libs-moved.txt" 2>&1 ||
  { cat "$logs/cuda-libs-moved.txt"; fail "/srv/moved/bin/det-fashion-mnist --cuda-libs failed"; }
grep -q 'libc.so.6 => /srv/moved/[^ ]*lib/libc.so.6 ' "$logs/cuda-libs-moved.txt" ||
  { cat "$logs/cuda-libs-moved.txt"; fail "the moved example does not load /srv/moved/lib/libc.so.6"; }
grep -q 'ExecStart=/srv/moved/bin/det-agent --config /srv/moved/etc/agent.yaml' \
  /srv/moved/share/det/systemd/det-agent.service || fail "the moved det-agent.service names another prefix"
"$unpacked/install.sh" >"$logs/install.log" 2>&1 ||
  { show_log "$logs/install.log"; fail "install.sh failed"; }
[ "$(/opt/det/bin/det-master --version)" = "det-master $version" ] ||
  fail "/opt/det/bin/det-master --version: $(/opt/det/bin/det-master --version 2>&1)"
rm -rf /srv/moved "$unpacked"

step "the example's CUDA launcher"
out=$(/opt/det/bin/det-fashion-mnist --cuda-libs 2>&1) || { echo "$out"; fail "--cuda-libs failed"; }
echo "$out" | head -n 1
echo "$out" | grep -q 'not found: .*libnccl.so.2.* stubs in /opt/det/lib/cuda-stubs' ||
  { echo "$out"; fail "--cuda-libs does not report the CUDA stubs"; }
echo "$out" | grep -q '/opt/det/lib/cuda-stubs/libcudart.so' ||
  { echo "$out"; fail "the example does not load the stub libcudart"; }
rc=0
out=$(DET_CUDA_LIB_DIR=/nowhere:/srv/cuda /opt/det/bin/det-fashion-mnist 2>&1) || rc=$?
[ "$rc" -eq 127 ] || fail "with DET_CUDA_LIB_DIR=/nowhere the example exited $rc, not 127: $out"
for want in libnccl.so.2 libcudart.so libcublas.so /nowhere /srv/cuda 'DET_CUDA_LIB_DIR from the environment'; do
  case $out in *"$want"*) ;; *) fail "the missing-CUDA error does not name $want: $out" ;; esac
done
echo "error: $out"
rc=0
out=$(DET_SLOT_TYPE=cuda /opt/det/bin/det-fashion-mnist 2>&1) || rc=$?
[ "$rc" -eq 127 ] || fail "on a CUDA slot without CUDA the example exited $rc, not 127: $out"
case $out in *"libnccl.so.2"*"/usr/local/cuda/lib64"*) ;; *) fail "the CUDA-slot error: $out" ;; esac

step "starting /opt/det/bin/det-master (installed config, loopback port 0)"
mkdir -p "$w/master" "$w/agent" "$w/home" "$w/checkpoints"
sed -e 's|^grpc_listen:.*|grpc_listen: "127.0.0.1:0"|' \
  -e 's|^http_listen:.*|http_listen: "127.0.0.1:0"|' \
  -e "s|^data_dir:.*|data_dir: $w/master|" /opt/det/etc/master.yaml >"$w/master.yaml"
echo "address_file: $w/master.address" >>"$w/master.yaml"
grep -qx "data_dir: $w/master" "$w/master.yaml" || fail "the installed master.yaml has no data_dir"
secret=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
admin_password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
export DET_CLUSTER_SECRET="$secret"
DET_ADMIN_PASSWORD=$admin_password /opt/det/bin/det-master --config "$w/master.yaml" \
  >"$logs/det-master.log" 2>&1 &
master_pid=$!
master_up() {
  kill -0 "$master_pid" 2>/dev/null || { show_log "$logs/det-master.log"; fail "det-master exited"; }
  [ -s "$w/master.address" ]
}
wait_for 30 "address from det-master ($logs/det-master.log)" master_up
master=$(cat "$w/master.address")
echo "master at $master"

step "starting /opt/det/bin/det-agent (installed config, CPU slot)"
sed -e "s|^master:.*|master: \"$master\"|" -e 's|^slot_type:.*|slot_type: cpu|' \
  -e "s|^work_dir:.*|work_dir: $w/agent|" -e 's|^worker_path:.*|worker_path: [/opt/det/bin]|' \
  /opt/det/etc/agent.yaml >"$w/agent.yaml"
echo "agent_id: portable-test-agent" >>"$w/agent.yaml"
grep -qx 'worker_path: \[/opt/det/bin\]' "$w/agent.yaml" || fail "the installed agent.yaml has no worker_path"
/opt/det/bin/det-agent --config "$w/agent.yaml" >"$logs/det-agent.log" 2>&1 &
agent_pid=$!

det_cli() { HOME=$w/home /opt/det/bin/det -m "$master" "$@"; }
DET_PASSWORD=$admin_password det_cli user login admin >/dev/null || fail "det user login admin failed"
agent_registered() {
  kill -0 "$agent_pid" 2>/dev/null || { show_log "$logs/det-agent.log"; fail "det-agent exited"; }
  det_cli agent list 2>/dev/null | grep -q portable-test-agent
}
wait_for 30 "registered agent portable-test-agent ($logs/det-agent.log)" agent_registered

step "libraries mapped by the daemons"
for pid in "$master_pid" "$agent_pid"; do
  libs=$(grep -o '/[^ ]*\.so[^ ]*' "/proc/$pid/maps" | sort -u)
  [ -n "$libs" ] || fail "no libraries in /proc/$pid/maps"
  foreign=$(echo "$libs" | grep -v '^/opt/det/lib/' || true)
  [ -z "$foreign" ] || fail "process $pid maps libraries from outside /opt/det/lib: $foreign"
  echo "$(readlink "/proc/$pid/exe"): $(echo "$libs" | wc -l) libraries, all in /opt/det/lib"
done

step "det experiment create $experiment (100 batches) --follow"
if ! HOME=$w/home timeout 150 /opt/det/bin/det -m "$master" experiment create "$experiment" \
    --config 'searcher.max_length={batches: 100}' \
    --config 'min_validation_period={batches: 50}' \
    --config "checkpoint_storage={type: shared_fs, host_path: '$w/checkpoints'}" \
    --config 'data.dir=/data' \
    --follow >"$logs/experiment.log" 2>&1; then
  show_log "$logs/experiment.log"
  show_log "$logs/det-agent.log"
  fail "det experiment create --follow failed or took over 150s"
fi
id=$(det_cli experiment list --json | tr -d ' \n' | grep -o '"id":"*[0-9]*' | head -n 1 | grep -o '[0-9]*$')
[ -n "$id" ] || fail "det experiment list shows no experiment"
det_cli experiment describe "$id" --json >"$logs/experiment.json"
# No JSON parser here: `--json` is indented by two spaces a level, so the experiment's own
# fields are at four spaces and its trials' at six.
grep -qx '    "state": "STATE_COMPLETED",' "$logs/experiment.json" ||
  { cat "$logs/experiment.json"; fail "experiment $id is not COMPLETED"; }
grep -qx '      "state": "STATE_COMPLETED",' "$logs/experiment.json" ||
  { cat "$logs/experiment.json"; fail "the trial of experiment $id is not COMPLETED"; }
grep -qx '      "total_batches": "100",' "$logs/experiment.json" ||
  { cat "$logs/experiment.json"; fail "the trial of experiment $id did not train 100 batches"; }
echo "experiment $id: COMPLETED, 100 batches"

step "stopping the daemons (SIGTERM)"
rc=0
stop_daemon "$agent_pid" det-agent || rc=$?
agent_pid=""
[ "$rc" -eq 0 ] || fail "det-agent exited $rc after SIGTERM"
rc=0
stop_daemon "$master_pid" det-master || rc=$?
master_pid=""
[ "$rc" -eq 0 ] || fail "det-master exited $rc after SIGTERM"
step "done"
