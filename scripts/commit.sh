#!/usr/bin/env bash
# The commit `make build` and `make release` link into cloud and host (what
# `version` prints): the checked-out commit, with "-dirty" when the tree has
# changes, as Go's own VCS stamp says it; nothing outside a checkout.
cd "$(dirname "$0")/.." || exit 0
commit=$(git rev-parse HEAD 2>/dev/null) || exit 0
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then
	commit=$commit-dirty
fi
echo "$commit"
