# shellcheck shell=bash
# Helpers shared by scripts/test, scripts/demo and scripts/device-build.
# Sourced, never run: it defines functions and sets nothing else but ROOT.

# shellcheck disable=SC2034 # used by the scripts that source this file
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Debian 12 packages that a build and the test suites need. nvcc is not here:
# the CUDA toolkit is optional (meson -Dgpu=auto) and not a Debian package.
# prometheus: for its promtool, which the ops suite's alerts test runs on
# contrib/prometheus (the test is skipped without it).
GPUSYS_DEBIAN_PACKAGES=(meson ninja-build pkg-config gcc libevent-dev
	libjansson-dev libsystemd-dev libcmocka-dev dpkg-dev debhelper prometheus)

say() { printf '%s\n' "$*"; }
warn() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() { warn "$*"; exit 1; }

# ensure_packages: install what is missing when root, else print the
# apt-get line and exit 1. Quiet when nothing is missing.
ensure_packages() {
	local pkg status missing=()
	if ! command -v dpkg-query >/dev/null 2>&1; then
		warn "no dpkg-query: not a Debian system, not checking packages"
		return 0
	fi
	for pkg in "${GPUSYS_DEBIAN_PACKAGES[@]}"; do
		status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null) || status=
		[[ $status == installed ]] || missing+=("$pkg")
	done
	((${#missing[@]} == 0)) && return 0

	if ((EUID != 0)); then
		warn "missing packages: ${missing[*]}; as root, run:"
		say "apt-get install -y ${missing[*]}" >&2
		exit 1
	fi
	say "==> installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update || die "apt-get update failed"
	apt-get install -y "${missing[@]}" || die "apt-get install failed"
}

# nvcc is optional, but the toolkit's usual place is not always on PATH.
add_cuda_to_path() {
	if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
		PATH=/usr/local/cuda/bin:$PATH
		export PATH
	fi
}

# meson_configure DIR [meson options...]: set up DIR, or reconfigure it when it
# is already a build directory, so that running a script twice is safe. A
# directory that meson cannot reconfigure (say, made by another meson version)
# is wiped and set up again.
meson_configure() {
	local dir=$1
	shift
	if [[ -f $dir/meson-private/coredata.dat ]]; then
		meson setup --reconfigure "$dir" "$@" && return 0
		warn "reconfiguring $dir failed; wiping it and setting it up again"
		meson setup --wipe "$dir" "$@"
	else
		meson setup "$dir" "$@"
	fi
}

# skip_reason_sed LINE: the last line of a testlog entry's output that
# mentions skipping, else its last line; JSON escapes other than \n are left.
skip_reason_sed() {
	local out why
	out=$(sed -n 's/.*"stdout": *"\(\([^"\\]\|\\.\)*\)".*/\1/p' <<<"$1")
	out+='\n'$(sed -n 's/.*"stderr": *"\(\([^"\\]\|\\.\)*\)".*/\1/p' <<<"$1")
	out=$(sed 's/^[[:space:]]*//; /^$/d' <<<"${out//\\n/$'\n'}")
	why=$(grep -i skip <<<"$out" | tail -n1) || true
	[[ -n $why ]] || why=$(tail -n1 <<<"$out")
	say "${why:-(no reason given)}" | cut -c1-200
}

# testlog_tally FILE: read meson's testlog.json (one JSON object a line).
# Prints "PASSED FAILED SKIPPED" on the first line, then one line for each
# skipped test ("SKIP name: reason") and each failed one ("FAIL name (RESULT)").
# OK and EXPECTEDFAIL pass, SKIP skips, everything else fails. A missing file
# counts as no tests.
testlog_tally() {
	local file=$1
	if [[ ! -s $file ]]; then
		say "0 0 0"
		return 0
	fi
	if command -v python3 >/dev/null 2>&1; then
		python3 - "$file" <<'EOF' && return 0
import json, sys

passed = failed = skipped = 0
notes = []
with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
    for line in f:
        line = line.strip()
        if not line:
            continue
        try:
            t = json.loads(line)
        except ValueError:
            failed += 1
            notes.append("FAIL <unreadable testlog line>")
            continue
        name = t.get("name", "?")
        res = t.get("result", "?")
        if res in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif res == "SKIP":
            skipped += 1
            # The reason is what the test said last; prefer a line that
            # mentions skipping.
            out = ((t.get("stdout") or "") + "\n" + (t.get("stderr") or "")).splitlines()
            out = [l.strip() for l in out if l.strip()]
            why = [l for l in out if "skip" in l.lower()]
            reason = (why or out or ["(no reason given)"])[-1]
            notes.append("SKIP %s: %s" % (name, reason[:200]))
        else:
            failed += 1
            notes.append("FAIL %s (%s)" % (name, res))
print(passed, failed, skipped)
for n in notes:
    print(n)
EOF
		warn "python3 could not read $file; counting with sed"
	fi
	# Without python3: json.dumps writes '"result": "OK"' once per line, and
	# quotes inside string values are escaped, so this cannot match test output.
	local res name p=0 f=0 s=0 notes=()
	while IFS= read -r line; do
		[[ -n $line ]] || continue
		res=$(sed -n 's/.*"result": *"\([A-Z]*\)".*/\1/p' <<<"$line")
		name=$(sed -n 's/^{"name": *"\(\([^"\\]\|\\.\)*\)".*/\1/p' <<<"$line")
		case $res in
		OK | EXPECTEDFAIL) p=$((p + 1)) ;;
		SKIP)
			s=$((s + 1))
			notes+=("SKIP ${name:-?}: $(skip_reason_sed "$line")")
			;;
		*)
			f=$((f + 1))
			notes+=("FAIL ${name:-?} (${res:-?})")
			;;
		esac
	done <"$file"
	say "$p $f $s"
	((${#notes[@]} == 0)) || printf '%s\n' "${notes[@]}"
}
