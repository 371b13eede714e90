package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is grok's version: the module's when built from a tagged
// release, else "dev" with the commit the binary was built from.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "dev"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += "+" + s.Value[:12]
		}
	}
	return v
}

// versionLine is what `grok --version` prints.
func versionLine() string {
	return fmt.Sprintf("grok %s (%s %s/%s)", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
