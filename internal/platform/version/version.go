// Package version is the release this build is: the one place the
// version is written. The binaries print it (`byorelay version`), every
// deployed function logs it at init, and a test holds it equal to both
// templates' SemanticVersion and to CHANGELOG.md's newest version
// heading, so what a deployment reports names a release a deployer can
// look up.
package version

// Version is the release, vMAJOR.MINOR.PATCH (Semantic Versioning). It
// moves in the commit that adds the CHANGELOG heading of the same name.
const Version = "v1.1.1"
