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
for u in "$src"/systemd/*.service "$src"/systemd/*.socket "$src"/systemd/user/*.service; do
	[[ -e $u ]] || continue
	out=$tmp/$(basename "$(dirname "$u")")-$(basename "$u")
	sed "s|@sbindir@|$tmp/sbin|g; s|@bindir@|$tmp/sbin|g; s|@sysconfdir@|$tmp/etc|g; s|@runstatedir@|/run|g" "$u" > "$out"
	if ! systemd-analyze verify --man=no "$out"; then
		echo "FAIL: systemd-analyze verify $(basename "$u")"
		status=1
	fi
done
score=$(systemd-analyze security --offline=yes "$tmp/systemd-gpusysd.service" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
echo "gpusysd.service exposure: $score"
awk -v s="$score" 'BEGIN { exit !(s != "" && s <= 4.0) }' || { echo "FAIL: exposure '$score' above 4.0"; status=1; }
exit $status
