#!/bin/bash
# The systemd units: systemd-analyze verify passes (paths substituted as
# meson install does), and the system unit's exposure stays at most 4.0 (the
# unit's first comment says what is left exposed and why). Skipped (77)
# without systemd-analyze.
set -u
src=$1
command -v systemd-analyze > /dev/null || { echo "SKIP: no systemd-analyze here"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/sbin" "$tmp/etc/gpusysd"
printf '#!/bin/sh\n' > "$tmp/sbin/gpusysd"
chmod +x "$tmp/sbin/gpusysd"
status=0
# Each folder's units verified together (a socket needs its service).
for sub in systemd systemd/user; do
	mkdir -p "$tmp/$sub"
	units=()
	for u in "$src/$sub"/*.service "$src/$sub"/*.socket; do
		[[ -e $u ]] || continue
		out=$tmp/$sub/$(basename "$u")
		sed "s|@sbindir@|$tmp/sbin|g; s|@bindir@|$tmp/sbin|g; s|@sysconfdir@|$tmp/etc|g; s|@runstatedir@|/run|g" "$u" > "$out"
		units+=("$out")
	done
	((${#units[@]})) || continue
	if ! systemd-analyze verify --man=no "${units[@]}"; then
		echo "FAIL: systemd-analyze verify ${units[*]}"
		status=1
	fi
done
score=$(systemd-analyze security --offline=yes "$tmp/systemd/gpusysd.service" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
echo "gpusysd.service exposure: $score"
awk -v s="$score" 'BEGIN { exit !(s != "" && s <= 4.0) }' || { echo "FAIL: exposure '$score' above 4.0"; status=1; }
exit $status
