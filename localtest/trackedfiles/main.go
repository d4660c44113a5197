// Command trackedfiles refuses a repository whose git index holds a built
// binary or a large file: every clone downloads every tracked byte forever,
// and a binary in git is one nobody can review or rebuild from the source
// beside it. `make lint` runs it.
//
//	go run ./localtest/trackedfiles [DIR]
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// maxBytes is the largest file the index may hold outside largeAllowed.
const maxBytes = 1 << 20

// largeAllowed names the tracked files that may pass maxBytes, each with
// why. It is empty: the largest tracked files are the protocol's test
// vectors, well under the limit.
var largeAllowed = map[string]string{}

// executableMagic are the first bytes of the executable formats Go and C
// toolchains write: ELF, Mach-O (both byte orders, 32 and 64 bit, and
// universal), PE and WebAssembly.
var executableMagic = [][]byte{
	[]byte("\x7fELF"),
	{0xfe, 0xed, 0xfa, 0xce}, {0xce, 0xfa, 0xed, 0xfe},
	{0xfe, 0xed, 0xfa, 0xcf}, {0xcf, 0xfa, 0xed, 0xfe},
	{0xca, 0xfe, 0xba, 0xbe},
	[]byte("MZ"),
	[]byte("\x00asm"),
}

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	problems, err := check(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trackedfiles:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "trackedfiles:", p)
	}
	if len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "trackedfiles: remove them from git (git rm --cached) and ignore them in .gitignore")
		os.Exit(1)
	}
}

// check lists every tracked file of the repository at dir that is a built
// executable, an executable-mode file that is not a #! script, or larger
// than maxBytes and not in largeAllowed.
func check(dir string) ([]string, error) {
	out, err := exec.Command("git", "-C", dir, "ls-files", "-s", "-z").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var problems []string
	for entry := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if entry == "" {
			continue
		}
		// "<mode> <object> <stage>\t<path>"
		meta, path, ok := strings.Cut(entry, "\t")
		if !ok {
			return nil, fmt.Errorf("git ls-files: unexpected entry %q", entry)
		}
		mode, _, _ := strings.Cut(meta, " ")
		if mode == "160000" || mode == "120000" { // a submodule or a symlink: no bytes of ours
			continue
		}
		if p, err := checkFile(filepath.Join(dir, path), path, mode == "100755"); err != nil {
			return nil, err
		} else if p != "" {
			problems = append(problems, p)
		}
	}
	slices.Sort(problems)
	return problems, nil
}

func checkFile(full, path string, executableMode bool) (string, error) {
	f, err := os.Open(full)
	if errors.Is(err, os.ErrNotExist) { // deleted in the work tree, not yet in the index
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 4)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", err
	}
	head = head[:n]
	for _, magic := range executableMagic {
		if bytes.HasPrefix(head, magic) {
			return path + ": a built executable", nil
		}
	}
	if executableMode && !bytes.HasPrefix(head, []byte("#!")) {
		return path + ": executable mode, but not a #! script", nil
	}
	info, err := f.Stat()
	if err != nil {
		return "", err
	}
	if _, ok := largeAllowed[path]; !ok && info.Size() > maxBytes {
		return fmt.Sprintf("%s: %d bytes, over the %d-byte limit for a tracked file", path, info.Size(), maxBytes), nil
	}
	return "", nil
}
