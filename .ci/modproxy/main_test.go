package main

import (
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// mod parses a go.mod for the tests of releaseVersion.
func mod(t *testing.T, dir, gomod string) repoModule {
	t.Helper()
	f, err := modfile.Parse(dir+"/go.mod", []byte(gomod), nil)
	if err != nil {
		t.Fatal(err)
	}
	return repoModule{dir: dir, path: f.Module.Mod.Path, gomod: []byte(gomod), file: f}
}

func TestReleaseVersionAgreed(t *testing.T) {
	root := mod(t, "", "module example.com/r\n\nrequire example.com/dep v1.2.3\n")
	sub := mod(t, "sub", "module example.com/r/sub\n\nrequire example.com/r v0.3.0\n\nreplace example.com/r => ../\n")
	user := mod(t, "user", "module example.com/r/user\n\nrequire (\n\texample.com/r v0.3.0\n\texample.com/r/sub v0.3.0\n\texample.com/r/examples v0.0.0\n)\n")
	v, err := releaseVersion([]repoModule{root, sub}, []repoModule{user})
	if err != nil {
		t.Fatal(err)
	}
	if v != "v0.3.0" {
		t.Fatalf("version %s, want v0.3.0", v)
	}
}

// TestReleaseVersionDisagreement: a module left at the previous version
// (a bump that missed one go.mod) is named in the error.
func TestReleaseVersionDisagreement(t *testing.T) {
	root := mod(t, "", "module example.com/r\n")
	sub := mod(t, "sub", "module example.com/r/sub\n\nrequire example.com/r v0.4.0\n")
	user := mod(t, "user", "module example.com/r/user\n\nrequire example.com/r/sub v0.3.0\n")
	_, err := releaseVersion([]repoModule{root, sub}, []repoModule{user})
	if err == nil || !strings.Contains(err.Error(), "user/go.mod: example.com/r/sub v0.3.0") {
		t.Fatalf("err = %v, want one naming user/go.mod's v0.3.0", err)
	}
}

// TestReleaseVersionPseudo: a pseudo-version names a commit, not a release;
// no tag can be made for it.
func TestReleaseVersionPseudo(t *testing.T) {
	root := mod(t, "", "module example.com/r\n")
	sub := mod(t, "sub", "module example.com/r/sub\n\nrequire example.com/r v0.0.0-20260101000000-abcdefabcdef\n")
	if _, err := releaseVersion([]repoModule{root, sub}, nil); err == nil {
		t.Fatal("no error for a pseudo-version")
	}
}

func TestReleaseVersionNone(t *testing.T) {
	root := mod(t, "", "module example.com/r\n")
	sub := mod(t, "sub", "module example.com/r/sub\n\nrequire example.com/dep v1.0.0\n")
	if _, err := releaseVersion([]repoModule{root, sub}, nil); err == nil {
		t.Fatal("no error when no module requires a published one")
	}
}
