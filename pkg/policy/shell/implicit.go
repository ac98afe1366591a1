package shell

import (
	"path/filepath"
	"strings"
)

// implicitWrites returns what a writer writes without naming it among its
// arguments: the working directory an extraction or a patch writes into
// when no other directory is given (unzip, cpio -i, ar x, 7z x, patch;
// tar's is in its option table), and the file a decompressor writes beside
// its operand (gunzip x/.npmrc.gz writes x/.npmrc; gzip -S names the
// suffix). A directory judged as written asks when it holds repository or
// package-manager configuration the write could replace; a file, when its
// name is such configuration.
func implicitWrites(base string, args []Word) []PathArg {
	for _, a := range args {
		if !a.Literal {
			return nil // judged as not known statically elsewhere
		}
	}
	cwd := []PathArg{{Path: ".", Write: true}}
	switch base {
	case "unzip":
		// unzip [-opts] file [members] [-x xlist] [-d exdir]; listing,
		// testing and printing modes write nothing.
		if shortOpt(args, "d") || shortOpt(args, "lZtvpcz") {
			return nil
		}
		return cwd
	case "cpio":
		// Copy-in (-i, --extract) writes into the working directory
		// unless -D/--directory names another; -t only lists.
		if (shortOpt(args, "i") || longOpt(args, "extract")) && !shortOpt(args, "Dt") && !longOpt(args, "directory", "list") {
			return cwd
		}
	case "ar":
		// ar [-]OP[mods] archive [members]: x extracts into the working
		// directory unless --output names another.
		if len(args) > 0 && strings.Contains(strings.TrimPrefix(args[0].Value, "-"), "x") && !longOpt(args, "output") {
			return cwd
		}
	case "7z", "7za", "7zr":
		// 7z x|e archive [-oDIR].
		if len(args) > 0 && (args[0].Value == "x" || args[0].Value == "e") && !prefixed(args, "-o") {
			return cwd
		}
	case "patch":
		return patchWrites(args)
	case "gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "lzma", "unlzma", "zstd", "unzstd", "lzip", "uncompress", "compress":
		return decompressed(base, args)
	}
	return nil
}

// patchValued are GNU patch's short options that take a value, which may
// be the next word.
const patchValued = "BdDFgioprVYz"

// patchLongValued are its long options that take one.
var patchLongValued = []string{"prefix", "directory", "ifdef", "fuzz", "get", "input", "output", "strip", "reject-file",
	"version-control", "basename-prefix", "suffix", "quoting-style", "reject-format", "read-only"}

// patchWrites: patch writes the files its patch names, under the working
// directory or -d DIR, unless it is given the one file to patch (or
// writes to -o FILE, or only tries).
func patchWrites(args []Word) []PathArg {
	if shortOpt(args, "do") || longOpt(args, "directory", "output", "dry-run") {
		return nil
	}
	operands := 0
	for i := 0; i < len(args); i++ {
		v := args[i].Value
		switch {
		case v == "--":
			operands += len(args) - i - 1
			i = len(args)
		case strings.HasPrefix(v, "--"):
			name, _, hasValue := strings.Cut(v[2:], "=")
			if !hasValue && longMatches(name, patchLongValued) {
				i++
			}
		case len(v) > 1 && v[0] == '-':
			// The first letter taking a value takes the rest of the
			// cluster, or the next word when the rest is empty.
			for j := 1; j < len(v); j++ {
				if strings.IndexByte(patchValued, v[j]) >= 0 {
					if j == len(v)-1 {
						i++
					}
					break
				}
			}
		default:
			operands++
		}
	}
	if operands > 0 {
		return nil // patch [options] originalfile [patchfile]: that file only
	}
	return []PathArg{{Path: ".", Write: true}}
}

// decompressors decompress without being told to.
var decompressors = map[string]bool{"gunzip": true, "bunzip2": true, "unxz": true, "unlzma": true, "unzstd": true, "uncompress": true}

// decompressSuffixes maps what a decompressor strips to what it puts back.
var decompressSuffixes = []struct{ from, to string }{
	{".tgz", ".tar"}, {".taz", ".tar"}, {".tbz2", ".tar"}, {".tbz", ".tar"}, {".txz", ".tar"}, {".tzst", ".tar"}, {".tlz", ".tar"},
	{".gz", ""}, {"-gz", ""}, {".z", ""}, {"-z", ""}, {"_z", ""}, {".Z", ""}, {".bz2", ""}, {".bz", ""},
	{".xz", ""}, {".lzma", ""}, {".zst", ""}, {".lz", ""},
}

// decompressed returns the files a compressor or decompressor writes
// beside its operands when it writes files at all (not -c/--stdout, not
// -t/-l): for decompression the operand without its suffix; with an
// explicit suffix (-S/--suffix), the operand with it added or taken away.
// Compressing without one adds .gz, .bz2, ... to the name, which no
// protected name ends with.
func decompressed(base string, args []Word) []PathArg {
	if shortOpt(args, "ctl") || longOpt(args, "stdout", "to-stdout", "test", "list") {
		return nil
	}
	decompress := decompressors[base] || shortOpt(args, "d") || longOpt(args, "decompress", "uncompress")
	suffix, ops := "", []string(nil)
	for i := 0; i < len(args); i++ {
		v := args[i].Value
		switch {
		case v == "--":
			for _, a := range args[i+1:] {
				ops = append(ops, a.Value)
			}
			i = len(args)
		case strings.HasPrefix(v, "--"):
			name, val, hasValue := strings.Cut(v[2:], "=")
			if longMatches(name, []string{"suffix"}) {
				if !hasValue && i+1 < len(args) {
					i++
					val = args[i].Value
				}
				suffix = val
			}
		case len(v) > 1 && v[0] == '-':
			if k := strings.IndexByte(v, 'S'); k > 0 {
				if k == len(v)-1 && i+1 < len(args) {
					i++
					suffix = args[i].Value
				} else {
					suffix = v[k+1:]
				}
			}
		case v != "-":
			ops = append(ops, v)
		}
	}
	var out []PathArg
	for _, op := range ops {
		switch {
		case suffix != "" && !decompress:
			out = append(out, PathArg{Path: op + suffix, Write: true})
		case suffix != "":
			if strings.HasSuffix(op, suffix) && len(op) > len(suffix) {
				out = append(out, PathArg{Path: strings.TrimSuffix(op, suffix), Write: true})
			}
		case decompress:
			for _, s := range decompressSuffixes {
				if strings.HasSuffix(op, s.from) && len(filepath.Base(op)) > len(s.from) {
					out = append(out, PathArg{Path: strings.TrimSuffix(op, s.from) + s.to, Write: true})
					break
				}
			}
		}
	}
	return out
}

// shortOpt reports whether a short option cluster among args (before a
// "--") holds any of letters.
func shortOpt(args []Word, letters string) bool {
	for _, a := range args {
		v := a.Value
		if v == "--" {
			return false
		}
		if len(v) > 1 && v[0] == '-' && v[1] != '-' && strings.ContainsAny(v[1:], letters) {
			return true
		}
	}
	return false
}

// longOpt reports whether a long option among args (before a "--") is one
// of names or a unique-looking abbreviation of one (--extr for
// --extract).
func longOpt(args []Word, names ...string) bool {
	for _, a := range args {
		v := a.Value
		if v == "--" {
			return false
		}
		if name, ok := strings.CutPrefix(v, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if longMatches(name, names) {
				return true
			}
		}
	}
	return false
}

// longMatches reports whether name is one of names or a prefix (of at
// least three letters) of one, as getopt_long accepts.
func longMatches(name string, names []string) bool {
	for _, n := range names {
		if name == n || (len(name) >= 3 && strings.HasPrefix(n, name)) {
			return true
		}
	}
	return false
}

// prefixed reports whether a word of args starts with p.
func prefixed(args []Word, p string) bool {
	for _, a := range args {
		if strings.HasPrefix(a.Value, p) {
			return true
		}
	}
	return false
}
