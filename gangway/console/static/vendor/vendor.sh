#!/usr/bin/env bash
# Refresh the console's vendored browser libraries from the npm registry (`make console-assets`).
# The files are committed: gangway serves them itself, so the page needs no CDN and works offline.
set -euo pipefail
cd "$(dirname "$0")"
version=$(python3 -c 'import json; print(json.load(open("package.json"))["dependencies"]["chart.js"])')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack "chart.js@$version" --silent >/dev/null && tar xzf "chart.js-$version.tgz")
cp "$work/package/dist/chart.umd.min.js" chart.umd.min.js
cp "$work/package/LICENSE.md" chart.js-LICENSE.md
echo "chart.js $version vendored: $(wc -c < chart.umd.min.js) bytes"
