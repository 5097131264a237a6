#!/usr/bin/env bash
# A task in a real podman container, through ContainerRuntime::WrapArgv
# (container_wrap_probe), with a tiny image built here without network: a
# rootfs holding a static busybox (Debian package busybox-static), imported
# as localhost/trainctl-smoke.
#  1. output, exit code, a mounted host directory as working directory, and
#     the task's variables (a secret, an empty one) arrive inside;
#  2. while it runs, the secret is in no process's command line
#     (/proc/*/cmdline) and not in root podman's environment (it reaches the
#     container through trainctl-container-env's file);
#  3. SIGTERM to `podman run` (what the launcher's Stop sends) ends it: 143
#     when podman forwarded it to the task (--init), 0 when it came before
#     podman's signal proxy; with CleanupCommands no container is left;
#  4. with --cgroup-parent at a task cgroup (cgroup v2, as CgroupTree makes
#     them), the container lands below it and cgroup.kill of the task cgroup
#     kills `podman run`, conmon and the container; CleanupCommands() then
#     removes podman's record of it (skipped without a writable v2);
#  5. through trainctl (coordinator, agent, CLI): a job with --image runs,
#     a cancelled one leaves no container;
#  6. a job's LD_PRELOAD (a library that writes a file wherever it loads)
#     reaches the task but is loaded by no root process (podman, conmon);
#  7. sessions into a running --image task (podman exec through
#     ContainerRuntime::ExecArgv): `trainctl exec` runs in the task's
#     container with its RANK, uid, variables and work dir, exits with the
#     command's code, and -i passes stdin; port-forward reaches a port the
#     task listens on (host network);
#  8. `trainctl shell --image IMG -- CMD` without a terminal: the command
#     runs in the image, its exit code comes back, and the job ends with it,
#     leaving no container;
#  9. (as root, with useradd) a job of a throwaway account that is not
#     root, through a coordinator with tokens: `trainctl exec` into its
#     container runs as its uid:gid (podman exec --user), in its work dir,
#     with its variables, none of which is on a command line or in root
#     `podman exec`'s environment.
# Steps 7 and 8 use a second image, the same busybox with applet links (sh,
# id, sleep, cat...) in /bin, as commands name them ("sh", not /bin/busybox).
# Exits 77 (ctest: skipped), saying why, where podman, catatonit or a static
# busybox is missing, or where podman cannot run a container at all (also
# with the fallbacks below). Usage: container_smoke_e2e.sh BUILD_BIN_DIR.
#
# Fallbacks tried when a plain `podman run` fails, each for a host problem
# seen on the development VM (docs/containers.md):
#  - --runtime runc: crun 1.8 refuses a hybrid cgroup host whose v2 tree has
#    a controller ("cgroups in hybrid mode not supported");
#  - --ulimit nofile/nproc at this shell's hard limits (nproc lowered to
#    16384 first): rootful podman asks for 1048576 of each, which needs
#    CAP_SYS_RESOURCE.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

skip() { echo "SKIP: $*"; exit 77; }
command -v podman >/dev/null || skip "podman not installed (apt-get install podman catatonit runc busybox-static)"
command -v catatonit >/dev/null || [[ -x /usr/libexec/podman/catatonit ]] ||
  skip "catatonit (podman --init) not installed"
[[ -x /bin/busybox ]] || skip "no /bin/busybox (apt-get install busybox-static)"
if ldd /bin/busybox >/dev/null 2>&1; then
  skip "/bin/busybox is dynamically linked (install busybox-static, not busybox)"
fi
e2e_init container "${1:-}"
[[ -x $BIN/container_wrap_probe ]] || { echo "no $BIN/container_wrap_probe (build it)"; exit 1; }

IMG=localhost/trainctl-smoke
NAME=trainctl-smoke-$$
# Removes cgroup REL (and what is below it) from every hierarchy under
# /sys/fs/cgroup: on a hybrid host podman's cgroupfs manager also creates it
# in each v1 hierarchy.
rm_cgroup() {
  local h
  for h in /sys/fs/cgroup /sys/fs/cgroup/*; do
    [[ -d $h$1 ]] && find "$h$1" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  return 0
}
probe_cleanup() {
  podman stop --ignore --time=0 "$NAME" >/dev/null 2>&1 || true
  podman rm --force --ignore "$NAME" >/dev/null 2>&1 || true
  [[ -n ${CG_REL:-} ]] && rm_cgroup "$CG_REL"
  e2e_cleanup
  [[ -n ${U9:-} ]] && userdel -r "$U9" 2>/dev/null
  return 0
}
trap probe_cleanup EXIT

podman_setup "$IMG" || skip "$PODMAN_WHY"
((${#why[@]} == 0)) || echo "note: plain podman failed here, using the '$found' fallback (${why[*]})"

probe_args=(--env-exec "$BIN/trainctl-container-env" --env-file "$WORK/task.env")
for a in "${G[@]}"; do probe_args+=(--global-arg "$a"); done
for a in "${R[@]}"; do probe_args+=(--run-arg "$a"); done
SECRET="tok-$$-$RANDOM-not-for-cmdline"
printf '%s' "$SECRET" >"$WORK/secret.pattern"
mkdir -p "$WORK/job"

# 1. Output, exit code, mount, workdir, environment.
rc=0
"$BIN/container_wrap_probe" "${probe_args[@]}" --image "$IMG" --name "$NAME" \
  --mount "$WORK/job" --workdir "$WORK/job" \
  --env "TRAINCTL_SMOKE_SECRET=$SECRET" --env EMPTY= --env PATH=/host/only \
  -- /bin/busybox sh -c 'echo hi; echo "secret=$TRAINCTL_SMOKE_SECRET"; echo "empty=[${EMPTY-unset}]"
    echo "path=$PATH"; echo "pwd=$(/bin/busybox pwd)"; echo written >out.txt; exit 3' \
  >"$WORK/run1.out" 2>"$WORK/run1.err" || rc=$?
out=$(cat "$WORK/run1.out")
[[ $rc == 3 ]] || { cat "$WORK/run1.err"; echo "FAIL: exit $rc, want 3; output: $out"; exit 1; }
grep -qx hi <<<"$out" || { echo "FAIL: no 'hi' in: $out"; exit 1; }
ok "podman run through WrapArgv: output and exit code 3 came back"
grep -qxF "secret=$SECRET" <<<"$out" || { echo "FAIL: secret did not arrive: $out"; exit 1; }
grep -qx 'empty=\[\]' <<<"$out" || { echo "FAIL: empty variable not set empty: $out"; exit 1; }
if grep -q 'path=/host/only' <<<"$out"; then echo "FAIL: host PATH replaced the image's"; exit 1; fi
ok "variables arrived (a secret, an empty one); PATH is the image's"
grep -qxF "pwd=$WORK/job" <<<"$out" && [[ $(cat "$WORK/job/out.txt") == written ]] ||
  { echo "FAIL: workdir/mount: $out"; exit 1; }
ok "the mounted host directory is the working directory, and writable"
if grep -qF -f "$WORK/secret.pattern" "$WORK/run1.err"; then
  echo "FAIL: the secret is in the wrapped argv"; exit 1
fi
ok "the wrapped argv holds no value"

# 2 and 3. A running task: no secret in any command line; SIGTERM ends it.
"$BIN/container_wrap_probe" "${probe_args[@]}" --image "$IMG" --name "$NAME" \
  --env "TRAINCTL_SMOKE_SECRET=$SECRET" \
  -- /bin/busybox sh -c 'echo ready; exec /bin/busybox sleep 120' \
  >"$WORK/run2.out" 2>"$WORK/run2.err" &
pid=$!
PIDS+=("$pid")
wait_line "$WORK/run2.out" '^ready$' >/dev/null
leaks=$(grep -lasF -f "$WORK/secret.pattern" /proc/[0-9]*/cmdline || true)
[[ -z $leaks ]] || { echo "FAIL: secret in command lines: $leaks"; exit 1; }
grep -qasF PATH= "/proc/$pid/environ" ||
  { echo "FAIL: cannot read podman's environment (check broken?)"; exit 1; }
if grep -qasF -f "$WORK/secret.pattern" "/proc/$pid/environ"; then
  echo "FAIL: the task's secret is in root podman's own environment"; exit 1
fi
ok "while running, the secret is in no /proc/*/cmdline and not in podman's environment"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
# podman forwards SIGTERM to the container once its signal proxy is up
# (exit 143); a SIGTERM just before that ends `podman run` with 0 and leaves
# the container, which the agent's CleanupCommands (run after every stop)
# remove.
[[ $rc == 143 || $rc == 0 ]] || { cat "$WORK/run2.err"; echo "FAIL: exit $rc after SIGTERM, want 143 or 0"; exit 1; }
"$BIN/container_wrap_probe" "${probe_args[@]}" --cleanup "$NAME" >/dev/null 2>"$WORK/cleanup2.err" ||
  { cat "$WORK/cleanup2.err"; echo "FAIL: cleanup commands failed"; exit 1; }
if podman container exists "$NAME"; then echo "FAIL: $NAME still known to podman after SIGTERM and cleanup"; exit 1; fi
ok "SIGTERM to podman run ended it (exit $rc) and, with CleanupCommands, the container"

# 4. In a task cgroup: cgroup.kill takes podman, conmon and the container.
V2=
for m in /sys/fs/cgroup /sys/fs/cgroup/unified; do
  [[ -f $m/cgroup.controllers ]] && { V2=$m; break; }
done
own=$(sed -n 's/^0:://p' /proc/self/cgroup)
[[ $own == / ]] && own=
CG_REL=$own/trainctl-smoke-$$
CG=$V2$CG_REL
if [[ -n $V2 ]] && mkdir "$CG" 2>/dev/null && [[ -f $CG/cgroup.kill ]]; then
  (echo "$BASHPID" >"$CG/cgroup.procs" &&
    exec "$BIN/container_wrap_probe" "${probe_args[@]}" --image "$IMG" --name "$NAME" \
      --cgroup-parent "$CG_REL" \
      -- /bin/busybox sh -c 'echo ready; exec /bin/busybox sleep 120') \
    >"$WORK/run3.out" 2>"$WORK/run3.err" &
  pid=$!
  PIDS+=("$pid")
  wait_line "$WORK/run3.out" '^ready$' >/dev/null
  inner=$(cat "$CG"/libpod-*/cgroup.procs 2>/dev/null | wc -l)
  ((inner >= 1)) || { find "$CG" -name cgroup.procs -exec grep -H . {} \;; echo "FAIL: no process in $CG/libpod-*"; exit 1; }
  echo 1 >"$CG/cgroup.kill"
  rc=0
  { wait "$pid"; } 2>/dev/null || rc=$?  # (no "Killed" job notice)
  [[ $rc == 137 ]] || { echo "FAIL: podman run exit $rc after cgroup.kill, want 137"; exit 1; }
  for _ in $(seq 100); do
    [[ $(grep populated "$CG/cgroup.events") == "populated 0" ]] && break
    sleep 0.05
  done
  [[ $(grep populated "$CG/cgroup.events") == "populated 0" ]] ||
    { echo "FAIL: $CG still populated after cgroup.kill"; exit 1; }
  ok "cgroup.kill of the task cgroup ended podman run, conmon and the container"
  "$BIN/container_wrap_probe" "${probe_args[@]}" --cleanup "$NAME" >/dev/null 2>"$WORK/cleanup.err" ||
    { cat "$WORK/cleanup.err"; echo "FAIL: cleanup commands failed"; exit 1; }
  if podman container exists "$NAME"; then echo "FAIL: $NAME still known to podman"; exit 1; fi
  ok "CleanupCommands (podman stop, rm) removed the killed container's record"
  rm_cgroup "$CG_REL"
  [[ ! -d $CG ]] || { echo "FAIL: cannot remove $CG"; exit 1; }
else
  echo "SKIPPED: step 4 (no writable cgroup v2 with cgroup.kill here)"
fi

# 5. Through trainctl: an agent that found podman says so, a job with --image
# runs in the container with the launch contract, and a cancelled one leaves
# no container behind.
"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
  >"$WORK/coordinator.out" 2>"$WORK/coordinator.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coordinator.out" "listening on port") || { echo "FAIL: coordinator"; exit 1; }
ADDR=127.0.0.1:${line##* }
"$BIN/trainctl-agent" --coordinator "$ADDR" --node-name box-node --fake-gpus 1 \
  --container-global-args "${G[*]}" --container-run-args "${R[*]}" \
  --log-dir "$WORK/logs" >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/agent.log" "registered with the coordinator" >/dev/null || { echo "FAIL: agent"; exit 1; }
grep -q "container runtime: podman" "$WORK/agent.log" || { echo "FAIL: agent found no podman"; exit 1; }
T=("$BIN/trainctl" --coordinator "$ADDR")
"${T[@]}" nodes -o json | grep -q '"podman"' || { echo "FAIL: the node does not report podman"; exit 1; }
id=$("${T[@]}" submit --image "$IMG" --workdir "$WORK/job" --export NONE \
  -- /bin/busybox sh -c 'echo "job $TRAINCTL_JOB_ID rank $RANK in $(/bin/busybox pwd)"; /bin/busybox test -e /bin/bash || echo "image rootfs"')
"${T[@]}" wait "$id" >/dev/null || { "${T[@]}" logs "$id"; echo "FAIL: container job $id"; exit 1; }
out=$("${T[@]}" logs "$id")
grep -qx "job $id rank 0 in $WORK/job" <<<"$out" && grep -qx "image rootfs" <<<"$out" ||
  { echo "FAIL: container job output: $out"; exit 1; }
ok "trainctl submit --image: job $id ran in the image with its launch environment and workdir"

# 6. A variable the loader, podman or conmon honour never reaches them as
# root: a library in LD_PRELOAD (the user's own, in --env and in the
# exported shell) would write a file as whoever loads it.
if command -v cc >/dev/null; then
  mkdir -p "$WORK/evil" && chmod 0777 "$WORK/evil"
  printf '%s\n' '#include <stdio.h>' '#include <unistd.h>' \
    '__attribute__((constructor)) static void pwn(void) {' \
    '  char p[4096]; snprintf(p, sizeof p, "%s/loaded-by-uid-%d", EVIL_DIR, (int)geteuid());' \
    '  FILE* f = fopen(p, "w"); if (f) fclose(f); }' >"$WORK/evil/evil.c"
  cc -shared -fPIC -DEVIL_DIR="\"$WORK/evil\"" -o "$WORK/evil/evil.so" "$WORK/evil/evil.c"
  # The check itself: the library does write its file where it is loaded.
  LD_PRELOAD=$WORK/evil/evil.so /bin/true
  [[ -e $WORK/evil/loaded-by-uid-$(id -u) ]] || { echo "FAIL: evil.so check broken"; exit 1; }
  rm -f "$WORK/evil"/loaded-by-uid-*
  # (--export NAME=VALUE: as exported from a shell, without loading the
  # library into the CLI itself.)
  id=$("${T[@]}" submit --image "$IMG" --env "TMPDIR=$WORK/evil" \
    --export "ALL,LD_PRELOAD=$WORK/evil/evil.so,CONTAINERS_CONF=$WORK/evil/containers.conf" \
    -- /bin/busybox sh -c 'echo "preload=$LD_PRELOAD tmpdir=$TMPDIR"')
  "${T[@]}" wait "$id" >/dev/null || { "${T[@]}" logs "$id"; echo "FAIL: job $id"; exit 1; }
  out=$("${T[@]}" logs "$id")
  grep -qxF "preload=$WORK/evil/evil.so tmpdir=$WORK/evil" <<<"$out" ||
    { echo "FAIL: the task's own variables did not reach it: $out"; exit 1; }
  if compgen -G "$WORK/evil/loaded-by-uid-*" >/dev/null; then
    echo "FAIL: a task's LD_PRELOAD ran in the runtime: $(ls "$WORK/evil")"; exit 1
  fi
  ok "LD_PRELOAD, CONTAINERS_CONF and TMPDIR of a job reach its task, not root podman or conmon"
else
  echo "SKIPPED: step 6 (no C compiler for the LD_PRELOAD library)"
fi
id=$("${T[@]}" submit --image "$IMG" --export NONE -- /bin/busybox sleep 300)
# trainctl-<cluster id>-j<job>-a<attempt>-r<rank>: the cluster's id keeps
# two clusters sharing this podman apart.
exists() { podman ps -a --format '{{.Names}}' | grep -qE "^trainctl-[0-9a-f]+-j$id-a0-r0\$"; }
end=$((SECONDS + 30))
until exists || ((SECONDS > end)); do read -rt 0.1 <> <(:) || true; done
exists || { podman ps -a >&2; echo "FAIL: container of job $id never ran"; exit 1; }
"${T[@]}" cancel "$id" >/dev/null
"${T[@]}" wait "$id" >/dev/null 2>&1 || true
end=$((SECONDS + 30))
while exists && ((SECONDS < end)); do read -rt 0.1 <> <(:) || true; done
if exists; then
  podman ps -a >&2; echo "FAIL: the cancelled job's container is still there"; exit 1
fi
ok "a cancelled --image job leaves no container behind"

# 7. Sessions into a running container task.
IMG_SH=localhost/trainctl-smoke-sh
if ! podman image exists "$IMG_SH"; then
  mkdir -p "$WORK/rootfs-sh/bin"
  cp /bin/busybox "$WORK/rootfs-sh/bin/busybox"
  for a in sh id sleep cat echo pwd httpd wget; do ln -s busybox "$WORK/rootfs-sh/bin/$a"; done
  tar -C "$WORK/rootfs-sh" -c . |
    podman import --quiet --change 'ENV PATH=/bin' - "$IMG_SH" >/dev/null ||
    { echo "FAIL: podman import $IMG_SH"; exit 1; }
fi
# Waits (30 s at most) until job $1's log has a line matching $2; prints it.
wait_log() {
  local end=$((SECONDS + 30)) out
  while ((SECONDS < end)); do
    out=$("${T[@]}" logs "$1" 2>/dev/null || true)
    if grep -qE "$2" <<<"$out"; then grep -E "$2" <<<"$out" | tail -1; return 0; fi
    read -rt 0.1 <> <(:) || true
  done
  return 1
}
# A free TCP port on 127.0.0.1 for the task's web server.
WPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# (Under the job's work dir: the one host directory mounted in its container.)
mkdir -p "$WORK/job/www" && echo "served-from-the-container" >"$WORK/job/www/index.html"
id=$("${T[@]}" submit --image "$IMG_SH" --workdir "$WORK/job" --export NONE --env MARK=m7 \
  -- sh -c "echo \"task \$RANK \$(id -u)\"; httpd -p 127.0.0.1:$WPORT -h $WORK/job/www; exec sleep 300")
line=$(wait_log "$id" '^task ') || { "${T[@]}" logs "$id"; echo "FAIL: job $id never printed its RANK and uid"; exit 1; }
want=${line#task }
rc=0
out=$("${T[@]}" exec "$id" -- sh -c 'echo "$RANK $(id -u)"; echo "mark=$MARK pwd=$(pwd)"; exit 7' \
  </dev/null 2>"$WORK/exec.err") || rc=$?
[[ $rc == 7 ]] || { cat "$WORK/exec.err"; echo "FAIL: trainctl exec exit $rc, want 7; output: $out"; exit 1; }
grep -qxF "$want" <<<"$out" ||
  { cat "$WORK/exec.err"; echo "FAIL: exec printed '$out', want the task's RANK and uid '$want'"; exit 1; }
grep -qxF "mark=m7 pwd=$WORK/job" <<<"$out" ||
  { echo "FAIL: exec lacks the task's variables or work dir: $out"; exit 1; }
ok "trainctl exec into --image job $id: RANK and uid of the task ($want), its variables and work dir, exit 7"
out=$(echo "through-stdin" | "${T[@]}" exec -i "$id" -- cat 2>"$WORK/exec-i.err") ||
  { cat "$WORK/exec-i.err"; echo "FAIL: exec -i cat"; exit 1; }
[[ $out == through-stdin ]] || { echo "FAIL: exec -i cat printed '$out'"; exit 1; }
ok "trainctl exec -i passes stdin into the container"
# Port-forward: the container is on the node's network (--network=host).
"${T[@]}" port-forward "$id" "0:$WPORT" >"$WORK/pf.out" 2>&1 &
PF=$!
PIDS+=("$PF")
line=$(wait_line "$WORK/pf.out" '127\.0\.0\.1:[0-9]+') || { cat "$WORK/pf.out"; echo "FAIL: port-forward did not listen"; exit 1; }
lport=$(grep -oE '127\.0\.0\.1:[0-9]+' <<<"$line" | head -1)
lport=${lport##*:}
page=
end=$((SECONDS + 30))
until [[ $page == served-from-the-container ]] || ((SECONDS > end)); do
  page=$(/bin/busybox wget -q -O - "http://127.0.0.1:$lport/" 2>/dev/null || true)
  [[ $page == served-from-the-container ]] || read -rt 0.1 <> <(:) || true
done
[[ $page == served-from-the-container ]] || { cat "$WORK/pf.out"; echo "FAIL: port-forward to the container's httpd: '$page'"; exit 1; }
kill "$PF" 2>/dev/null || true
ok "trainctl port-forward reaches a port the container task listens on"
"${T[@]}" cancel "$id" >/dev/null
"${T[@]}" wait "$id" >/dev/null 2>&1 || true

# 8. trainctl shell --image without a terminal.
rc=0
out=$("${T[@]}" shell --image "$IMG_SH" --workdir "$WORK/job" --export NONE \
  -- sh -c 'echo "in-$((40 + 2)) rank=$RANK"; exit 3' </dev/null 2>"$WORK/shell.err") || rc=$?
[[ $rc == 3 ]] || { cat "$WORK/shell.err"; echo "FAIL: shell --image exit $rc, want 3; output: $out"; exit 1; }
grep -qx "in-42 rank=0" <<<"$out" || { cat "$WORK/shell.err"; echo "FAIL: shell --image printed: $out"; exit 1; }
sid=$(sed -n 's/^trainctl: interactive job \([0-9]*\)$/\1/p' "$WORK/shell.err")
[[ -n $sid ]] || { cat "$WORK/shell.err"; echo "FAIL: no job id from shell --image"; exit 1; }
"${T[@]}" wait "$sid" >/dev/null 2>&1 || true
exists() { podman ps -a --format '{{.Names}}' | grep -qE "^trainctl-[0-9a-f]+-j$sid-a0-r0\$"; }
end=$((SECONDS + 30))
while exists && ((SECONDS < end)); do read -rt 0.1 <> <(:) || true; done
if exists; then podman ps -a >&2; echo "FAIL: shell job $sid's container is still there"; exit 1; fi
ok "trainctl shell --image: the command ran in the image (exit 3), and its job $sid ended without a container left"

# 9. A job of an account that is not root: exec runs as its uid:gid.
if [[ $(id -u) == 0 ]] && command -v useradd >/dev/null; then
  U9=tcx$$
  useradd -m -s /bin/sh "$U9"
  HOME9=$(getent passwd "$U9" | cut -d: -f6)
  mkdir -m 700 "$HOME9/proj" && chown "$U9:" "$HOME9/proj"
  TOK9=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
  echo "tokens { token: \"$TOK9\" user: \"$U9\" }" >"$WORK/tokens.txtpb"
  chmod 600 "$WORK/tokens.txtpb"
  chmod 711 "$WORK"  # (the account reaches its work dir's stage and log)
  "$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state9" \
    --tokens-file "$WORK/tokens.txtpb" >"$WORK/coordinator9.out" 2>"$WORK/coordinator9.log" &
  PIDS+=($!)
  line=$(wait_line "$WORK/coordinator9.out" "listening on port") || { echo "FAIL: coordinator 9"; exit 1; }
  ADDR9=127.0.0.1:${line##* }
  "$BIN/trainctl-agent" --coordinator "$ADDR9" --node-name box-node9 --fake-gpus 1 \
    --container-global-args "${G[*]}" --container-run-args "${R[*]}" \
    --log-dir "$WORK/logs9" >"$WORK/agent9.log" 2>&1 &
  PIDS+=($!)
  wait_line "$WORK/agent9.log" "registered with the coordinator" >/dev/null || { echo "FAIL: agent 9"; exit 1; }
  T=("$BIN/trainctl" --coordinator "$ADDR9" --token "$TOK9")
  SECRET9="tok9-$$-$RANDOM-not-for-root"
  printf '%s' "$SECRET9" >"$WORK/secret9.pattern"
  id=$("${T[@]}" submit --image "$IMG_SH" --workdir "$HOME9/proj" --export NONE --env MARK=m9 \
    --env "SECRET9=$SECRET9" -- sh -c 'echo "task $RANK $(id -u)"; exec sleep 300')
  line=$(wait_log "$id" '^task ') || { "${T[@]}" logs "$id"; echo "FAIL: $U9's job $id never started"; exit 1; }
  want="$(id -u "$U9"):$(id -g "$U9") mark=m9 pwd=$HOME9/proj"
  [[ $line == "task 0 $(id -u "$U9")" ]] || { echo "FAIL: $U9's task says '$line'"; exit 1; }
  rc=0
  out=$("${T[@]}" exec "$id" -- sh -c 'echo "$(id -u):$(id -g) mark=$MARK pwd=$(pwd)"; exit 9' \
    </dev/null 2>"$WORK/exec9.err") || rc=$?
  [[ $rc == 9 && $out == "$want" ]] ||
    { cat "$WORK/exec9.err"; echo "FAIL: exec into $U9's job: exit $rc, '$out', want 9, '$want'"; exit 1; }
  ok "trainctl exec into $U9's --image job runs as its uid:gid, in its work dir, with its variables"
  # While a session runs: its secret is inside, in no command line, and not
  # in the environment of root `podman exec`.
  "${T[@]}" exec "$id" -- sh -c 'echo "up $SECRET9"; exec sleep 120' </dev/null >"$WORK/exec9b.out" 2>&1 &
  EX=$!
  PIDS+=("$EX")
  wait_line "$WORK/exec9b.out" "^up $SECRET9\$" >/dev/null ||
    { cat "$WORK/exec9b.out"; echo "FAIL: the session did not see the job's secret"; exit 1; }
  leaks=$(grep -lasF -f "$WORK/secret9.pattern" /proc/[0-9]*/cmdline || true)
  [[ -z $leaks ]] || { echo "FAIL: secret in command lines: $leaks"; exit 1; }
  px=$(pgrep -f -- "exec --detach-keys= --user $(id -u "$U9")" | head -1)
  [[ -n $px ]] && grep -qasF PATH= "/proc/$px/environ" ||
    { ps -ef >&2; echo "FAIL: no root podman exec process found"; exit 1; }
  [[ $(stat -c %u "/proc/$px") == 0 ]] || { echo "FAIL: podman exec is not root's"; exit 1; }
  if grep -qasF -f "$WORK/secret9.pattern" "/proc/$px/environ"; then
    echo "FAIL: the job's secret is in root podman exec's environment"; exit 1
  fi
  kill "$EX" 2>/dev/null || true
  ok "while a session runs, the job's secret is in no /proc/*/cmdline and not in root podman exec's environment"
  "${T[@]}" cancel "$id" >/dev/null
  "${T[@]}" wait "$id" >/dev/null 2>&1 || true
else
  echo "SKIPPED: step 9 (needs root and useradd)"
fi
e2e_done
