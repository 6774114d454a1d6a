#!/bin/bash
# The bash completion of gpusysctl offers its commands and options.
set -u
. "$1" || exit 1
check() { # words... -> expect
	local want=$1
	shift
	COMP_WORDS=("$@")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMPREPLY=()
	_gpusysctl
	[[ " ${COMPREPLY[*]} " == *" $want "* ]] || { echo "FAIL: '$*' offers '${COMPREPLY[*]}', not $want"; exit 1; }
}
check clients gpusysctl cl
check watch gpusysctl --json w
check --runtime-dir gpusysctl status --run
check gpu-fail gpusysctl gpu
check pollers gpusysctl po
complete -p gpusysctl > /dev/null || { echo "FAIL: not registered"; exit 1; }
echo "completion: ok"
