package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"

	"github.com/bunqueue/bunqueue/tests/dbtest"
)

// The modules of this repository that the tool's module requires, and
// the tool's own import path.
const (
	rootModule  = "github.com/bunqueue/bunqueue"
	testsModule = "github.com/bunqueue/bunqueue/tests"
	toolPackage = "github.com/bunqueue/bunqueue/cmd/bunqueue"
)

// zeroPseudoVersion is the placeholder version of a requirement that only
// a replace directive makes resolvable.
const zeroPseudoVersion = "v0.0.0-00010101000000-000000000000"

// toolGoMod parses this module's go.mod.
func toolGoMod(t *testing.T) *modfile.File {
	t.Helper()
	data, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	f, err := modfile.Parse("go.mod", data, nil)
	require.NoError(t, err)
	return f
}

// requiredVersion returns the version of path that go.mod f requires.
func requiredVersion(t *testing.T, f *modfile.File, path string) string {
	t.Helper()
	for _, r := range f.Require {
		if r.Mod.Path == path {
			return r.Mod.Version
		}
	}
	require.Failf(t, "missing requirement", "go.mod does not require %s", path)
	return ""
}

// `go install github.com/bunqueue/bunqueue/cmd/bunqueue@VERSION` (and
// `go run ...@VERSION`) refuses a module whose go.mod has replace or
// exclude directives, and it can only fetch requirements at versions that
// exist: the checkout's own modules come from go.work, not from go.mod.
func TestGoModInstallable(t *testing.T) {
	t.Parallel()
	f := toolGoMod(t)
	require.Equal(t, toolPackage, f.Module.Mod.Path)
	for _, r := range f.Replace {
		require.Failf(t, "replace directive", "go.mod replaces %s: `go install %s@VERSION` refuses that; "+
			"the checkout's modules come from go.work", r.Old.Path, toolPackage)
	}
	require.Empty(t, f.Exclude, "`go install %s@VERSION` refuses exclude directives too", toolPackage)
	for _, path := range []string{rootModule, testsModule} {
		v := requiredVersion(t, f, path)
		require.NotEqual(t, zeroPseudoVersion, v, "%s: a version that can be fetched, not the placeholder of a replace", path)
		require.NoError(t, module.Check(path, v))
	}
}

// goEnv returns the value of the go command's variable name.
func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// goCommand runs `go args...` in dir with env added to this process's
// environment (GOWORK=off: outside this checkout's workspace) and returns
// its combined output, failing the test if it fails.
func goCommand(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOWORK=off", "GOTOOLCHAIN=local"}, env...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// checkoutRoot returns the directory of the repository's root module.
func checkoutRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.work"))
	return root
}

// moduleProxy is a GOPROXY directory (file://) serving modules made from
// directories of this checkout.
type moduleProxy struct {
	dir string
}

// add serves the module path at version from the directory src: its
// go.mod, and its files as the go command would download them.
func (p moduleProxy) add(t *testing.T, path, version, src string) {
	t.Helper()
	escaped, err := module.EscapePath(path)
	require.NoError(t, err)
	dir := filepath.Join(p.dir, escaped, "@v")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	info, err := json.Marshal(map[string]any{"Version": version, "Time": time.Now().UTC().Format(time.RFC3339)})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, version+".info"), info, 0o644))
	mod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, version+".mod"), mod, 0o644))
	zf, err := os.Create(filepath.Join(dir, version+".zip"))
	require.NoError(t, err)
	require.NoError(t, modzip.CreateFromDir(zf, module.Version{Path: path, Version: version}, src))
	require.NoError(t, zf.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "list"), []byte(version+"\n"), 0o644))
}

// The tool installs the ways docs/cli.md says: in an app, with `go get
// -tool`, and anywhere with `go install
// github.com/bunqueue/bunqueue/cmd/bunqueue@VERSION`.
func TestInstall(t *testing.T) {
	t.Parallel()
	root := checkoutRoot(t)

	// An app pins the tool with the go.mod it builds with: `go get -tool
	// github.com/bunqueue/bunqueue/cmd/bunqueue@VERSION`, then `go tool
	// bunqueue`. Here from a new module whose replace directives point at
	// this checkout. Its modules are those the tool's go.mod requires,
	// older for some than those of the workspace (which the checkout's
	// builds fetch): they come from the module cache, else from GOPROXY,
	// into the module cache, for the next step. With them cached, this
	// runs with GOPROXY=off.
	t.Run("go get -tool in an app", func(t *testing.T) {
		app := t.TempDir()
		goMod := strings.Join([]string{
			"module example.com/app",
			"",
			"go 1.25.0",
			"",
			"replace " + rootModule + " => " + root,
			"replace " + testsModule + " => " + filepath.Join(root, "tests"),
			"replace " + toolPackage + " => " + filepath.Join(root, "cmd", "bunqueue"),
			"",
		}, "\n")
		require.NoError(t, os.WriteFile(filepath.Join(app, "go.mod"), []byte(goMod), 0o644))
		sum, err := os.ReadFile("go.sum")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(app, "go.sum"), sum, 0o644))

		// At a version, or the go command asks the proxy for the latest:
		// the replace directive serves every version.
		env := []string{"GOFLAGS=-mod=mod"}
		goCommand(t, app, env, "get", "-tool", toolPackage+"@"+requiredVersion(t, toolGoMod(t), rootModule))
		require.Contains(t, goCommand(t, app, env, "tool", "bunqueue", "--help"), "Usage: bunqueue")
		bin := filepath.Join(app, "bunqueue")
		goCommand(t, app, env, "build", "-o", bin, toolPackage)
		runInstalled(t, bin)
	})
	if t.Failed() {
		return
	}

	// What docs/cli.md tells a user to run, here from a module proxy that
	// serves this checkout's modules at the versions the tool's go.mod
	// requires (and the tool at the root module's version, as a release
	// tags both), then the module cache. No network: every other module
	// is in the module cache (the step above made sure).
	t.Run("go install @VERSION", func(t *testing.T) {
		f := toolGoMod(t)
		version := requiredVersion(t, f, rootModule)
		tmp := t.TempDir()
		proxy := moduleProxy{dir: filepath.Join(tmp, "proxy")}
		proxy.add(t, rootModule, version, root)
		proxy.add(t, testsModule, requiredVersion(t, f, testsModule), filepath.Join(root, "tests"))
		proxy.add(t, toolPackage, version, filepath.Join(root, "cmd", "bunqueue"))

		bin := filepath.Join(tmp, "bin")
		goCommand(t, tmp, []string{
			"GOPROXY=file://" + filepath.ToSlash(proxy.dir) + ",file://" + filepath.ToSlash(filepath.Join(goEnv(t, "GOMODCACHE"), "cache", "download")),
			// The module cache keeps a version once fetched: these versions
			// are this checkout's, so they go in a cache of their own
			// (-trimpath, so that what is compiled from it is reused by the
			// next run's).
			"GOMODCACHE=" + filepath.Join(tmp, "modcache"),
			"GOSUMDB=off", // the checkout's modules are in no checksum database
			"GOFLAGS=-trimpath -modcacherw",
			"GOBIN=" + bin,
		}, "install", toolPackage+"@"+version)
		runInstalled(t, filepath.Join(bin, "bunqueue"))
	})
}

// runInstalled checks that an installed tool runs: its help, and its
// commands on the server the tests run on.
func runInstalled(t *testing.T, bin string) {
	t.Helper()
	stdout, stderr, code := runBinary(t, bin, "--help")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "Usage: bunqueue")

	dsn := dbtest.Scratch(t, "bqcli_install")
	_, stderr, code = runBinary(t, bin, "migrate", "--dsn", dsn)
	require.Equal(t, exitOK, code, stderr)
	stdout, stderr, code = runBinary(t, bin, "stats", "--dsn", dsn, "--json")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "{")
}
