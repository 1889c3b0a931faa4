#!/usr/bin/env bash
# `make release`: static binaries of cloud and host for every platform of
# RELEASE_PLATFORMS, stamped with VERSION and COMMIT, and their SHA-256
# checksums, in dist/VERSION/. The Dockerfile builds its binaries with this
# script too (--flat), so an image holds the same build as a release.
#
#   scripts/release.sh                       every platform, into dist/$VERSION/
#   scripts/release.sh --out DIR --flat      this GOOS/GOARCH only, as DIR/cloud and DIR/host
#
# VERSION defaults to shared/buildinfo/VERSION, the version every build of
# cloud and host carries (make build and a plain go build embed the same
# file). COMMIT defaults to the checkout's (scripts/commit.sh), as make
# build's; set it where the build has no checkout (the Dockerfile).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=${VERSION:-$(cat shared/buildinfo/VERSION)}
COMMIT=${COMMIT:-$(scripts/commit.sh)}
PLATFORMS=${RELEASE_PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
out="" flat=0
while [ $# -gt 0 ]; do
	case "$1" in
	--out) out=$2; shift 2 ;;
	--flat) flat=1; shift ;;
	*) echo "release.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
case "$VERSION$COMMIT" in
*[!A-Za-z0-9._+-]*) echo "release.sh: VERSION and COMMIT take letters, digits and . _ + - only" >&2; exit 2 ;;
esac

# build GOOS GOARCH OUTPUT PACKAGE...: the one way cloud and host are built,
# for a release, an image, make build, the bench, the fault suite, the soak
# and the end-to-end tests. CGO_ENABLED=0: static
# (SQLite is modernc's, in Go), no dynamic loader or C library to start;
# -tags nomsgpack: without gin's MessagePack binding, which nothing here
# uses and whose packages (ugorji's codec, net/rpc, encoding/gob) every
# start would initialise; -trimpath: no build paths in the binary; the
# version and commit are what `version` prints. OUTPUT is a file for one
# package, or a directory ending in / for several (linked side by side).
pkg=github.com/relaykit/relay/shared/buildinfo
build() {
	local os=$1 arch=$2 dest=$3
	shift 3
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -tags nomsgpack \
		-ldflags "-s -w -X $pkg.version=$VERSION${COMMIT:+ -X $pkg.commit=$COMMIT}" -o "$dest" "$@"
}

if [ "$flat" = 1 ]; then
	out=${out:-dist}
	mkdir -p "$out"
	build "$(go env GOOS)" "$(go env GOARCH)" "$out/" ./cloud ./host
	exit 0
fi

out=${out:-dist/$VERSION}
rm -rf "$out"
mkdir -p "$out"
for p in $PLATFORMS; do
	os=${p%/*} arch=${p#*/}
	for bin in cloud host; do
		echo "==> $bin $os/$arch"
		build "$os" "$arch" "$out/${bin}_${VERSION}_${os}_${arch}" "./$bin"
	done
done
(cd "$out" && sha256sum -- cloud_* host_* > SHA256SUMS)
echo "==> $out: $(ls "$out" | wc -l) files; verify with: (cd $out && sha256sum -c SHA256SUMS)"
