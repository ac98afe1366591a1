package shell

import "strings"

// Option tables of the programs that write files their arguments do not
// name (see implicitWrites). They are not strict: an option missing from
// a table makes the parse unsure, and an unsure parse is judged as
// writing everything it might.

var unzipSpec = spec("unzip", "permute",
	"Z", "c", "f", "l", "p", "t", "T", "u", "v", "z", "a", "b", "B", "C", "D", "e", "j", "K", "L", "M", "n", "N", "o",
	"q", "s", "U", "V", "W", "X", "x", "h", "d= dir", "P=", "I=", "O=")

var cpioSpec = spec("cpio", "abbrev permute",
	"i|extract", "o|create", "p|pass-through", "t|list", "a|reset-access-time", "A|append", "b|swap", "B", "c",
	"C|io-size=", "d|make-directories", "D|directory= dir", "E|pattern-file= path", "f|nonmatching", "F|file= path",
	"force-local", "H|format=", "I= path", "k", "l|link", "L|dereference", "m|preserve-modification-time",
	"M|message=", "n|numeric-uid-gid", "no-absolute-filenames", "absolute-filenames", "no-preserve-owner",
	"O= write", "only-verify-crc", "quiet", "r|rename", "R|owner=", "rsh-command= exec:cpio --rsh-command runs a program",
	"s|swap-bytes", "S|swap-halfwords", "sparse", "to-stdout", "u|unconditional", "v|verbose", "V|dot",
	"W|warning=", "0|null", "device-independent|reproducible", "ignore-devno", "renumber-inodes", "help", "usage", "version")

var patchSpec = spec("patch", "abbrev permute",
	"b|backup", "B|prefix= write", "backup-if-mismatch", "no-backup-if-mismatch", "binary", "c|context",
	"d|directory= dir", "D|ifdef=", "dry-run", "e|ed", "E|remove-empty-files", "f|force", "F|fuzz=",
	"g|get= exec:patch -g checks files out of RCS or ClearCase, running their commands", "help", "i|input= path",
	"l|ignore-whitespace", "merge=?", "n|normal", "N|forward", "o|output= write", "p|strip=", "posix",
	"quoting-style=", "r|reject-file= write", "reject-format=", "read-only=", "R|reverse", "s|quiet|silent",
	"t|batch", "T|set-time", "u|unified", "v|version", "V|version-control=", "verbose", "x|debug=",
	"Y|basename-prefix= write", "z|suffix= write", "Z|set-utc", "follow-symlinks")

var gzipSpec = spec("gzip", "abbrev permute digits",
	"a|ascii", "c|stdout|to-stdout", "d|decompress|uncompress", "f|force", "h|help", "k|keep", "l|list",
	"L|license", "n|no-name", "N|name", "q|quiet", "r|recursive", "rsyncable", "S|suffix=", "synchronous",
	"t|test", "v|verbose", "V|version", "fast", "best")

var bzip2Spec = spec("bzip2", "abbrev permute digits",
	"c|stdout", "d|decompress", "z|compress", "t|test", "f|force", "k|keep", "s|small", "q|quiet", "v|verbose",
	"L|license", "V|version", "h|help", "fast", "best")

var xzSpec = spec("xz", "abbrev permute digits",
	"z|compress", "d|decompress|uncompress", "t|test", "l|list", "k|keep", "f|force", "c|stdout|to-stdout",
	"S|suffix=", "files=? reads", "files0=? reads", "F|format=", "C|check=", "T|threads=", "M|memlimit|memory=",
	"memlimit-compress=", "memlimit-decompress=", "memlimit-mt-decompress=", "e|extreme", "q|quiet", "v|verbose",
	"Q|no-warn", "robot", "h|help", "H|long-help", "V|version", "single-stream", "no-sparse", "ignore-check",
	"block-size=", "block-list=", "flush-timeout=", "no-adjust", "info-memory", "lzma1=?", "lzma2=?", "x86=?",
	"arm=?", "armthumb=?", "arm64=?", "powerpc=?", "ia64=?", "sparc=?", "riscv=?", "delta=?", "fast", "best")

var zstdSpec = spec("zstd", "abbrev permute digits",
	"z|compress", "d|decompress|uncompress", "t|test", "l|list", "k|keep", "f|force", "c|stdout", "o= write",
	"D= path", "r", "q|quiet", "v|verbose", "h|help", "H", "V|version", "T|threads=", "M|memory=", "rm",
	"no-progress", "progress", "ultra", "long=?", "fast=?", "adapt=?", "single-thread", "rsyncable",
	"exclude-compressed", "content-size", "no-content-size", "check", "no-check", "sparse", "no-sparse",
	"patch-from= path", "output-dir-flat= write", "output-dir-mirror= write", "filelist= reads", "trace= write",
	"format=", "stream-size=", "size-hint=", "pass-through", "no-pass-through", "auto-threads=", "memlimit=",
	"memlimit-decompress=")

// implicitWrites returns what a program with an option table writes
// without naming it among its arguments: the working directory an
// extraction or a patch writes into when no other directory is given
// (tar -x, unzip, cpio -i, patch without a file to patch), and the file a
// decompressor writes beside its operand (gunzip x/.npmrc.gz writes
// x/.npmrc; -S names the suffix). A directory judged as written asks when
// it holds repository or package-manager configuration the write could
// replace; a file, when its name is such configuration.
func implicitWrites(base string, p *parsedArgs) []PathArg {
	cwd := []PathArg{{Path: ".", Write: true}}
	switch base {
	case "tar", "bsdtar":
		// Unless told another directory (-C) or the standard output (-O).
		if p.unsure || (p.has("x") && !p.has("C", "O")) {
			return cwd
		}
	case "unzip":
		// Unless told another directory (-d), or listing, testing or
		// printing.
		if p.unsure || !p.has("d", "Z", "l", "t", "v", "p", "c", "z") {
			return cwd
		}
	case "cpio":
		// Copy-in, unless told another directory (-D) or only listing.
		if p.unsure || (p.has("i") && !p.has("D", "t", "to-stdout")) {
			return cwd
		}
	case "patch":
		// The files its patch names, under -d DIR or here, unless it is
		// given the one file to patch or only tries; backups whose names
		// it is told (-B, -Y, -z) can land anywhere.
		if p.unsure || p.has("B", "Y", "z") || (!p.has("d", "o", "dry-run") && len(p.operands) == 0) {
			return cwd
		}
	default:
		if compressors[base] != nil {
			return decompressed(base, p)
		}
	}
	return nil
}

// compressors are the compression programs by name, with their tables.
var compressors = map[string]*optSpec{
	"gzip": gzipSpec, "gunzip": gzipSpec, "bzip2": bzip2Spec, "bunzip2": bzip2Spec, "xz": xzSpec, "unxz": xzSpec,
	"lzma": xzSpec, "unlzma": xzSpec, "zstd": zstdSpec, "unzstd": zstdSpec,
}

// decompressors decompress without being told to.
var decompressors = map[string]bool{"gunzip": true, "bunzip2": true, "unxz": true, "unlzma": true, "unzstd": true}

// decompressSuffixes maps what a decompressor strips to what it puts back.
var decompressSuffixes = []struct{ from, to string }{
	{".tgz", ".tar"}, {".taz", ".tar"}, {".tbz2", ".tar"}, {".tbz", ".tar"}, {".txz", ".tar"}, {".tzst", ".tar"}, {".tlz", ".tar"},
	{".gz", ""}, {"-gz", ""}, {".z", ""}, {"-z", ""}, {"_z", ""}, {".Z", ""}, {".bz2", ""}, {".bz", ""},
	{".xz", ""}, {".lzma", ""}, {".zst", ""}, {".lz", ""},
}

// decompressed returns the files a compressor writes beside its operands
// when it writes files at all (not -c, -t, -l): decompressing, the operand
// without its suffix; with a suffix of its own (-S), the operand with it
// added or taken away. Compressing without -S adds .gz, .bz2, ... to the
// name, which no protected name ends with. An unsure parse is judged both
// ways.
func decompressed(base string, p *parsedArgs) []PathArg {
	if !p.unsure && p.has("c", "t", "l") {
		return nil
	}
	decompress := decompressors[base] || p.has("d")
	suffix := ""
	for _, o := range p.opts {
		if o.def.id == "S" && o.hasValue {
			suffix = o.value.Value
		}
	}
	ops := p.operands
	if p.unsure {
		ops = nil
		for _, o := range p.opts {
			if o.hasValue {
				ops = append(ops, o.value)
			}
		}
		ops = append(ops, p.operands...)
	}
	var out []PathArg
	add := func(path string) { out = append(out, PathArg{Path: path, Write: true}) }
	for _, op := range ops {
		if !op.Literal {
			continue // not known statically: judged elsewhere
		}
		v := op.Value
		if suffix != "" && (!decompress || p.unsure) {
			add(v + suffix)
		}
		if !decompress && !p.unsure {
			continue
		}
		if suffix != "" && strings.HasSuffix(v, suffix) && len(v) > len(suffix) {
			add(strings.TrimSuffix(v, suffix))
		}
		for _, s := range decompressSuffixes {
			if strings.HasSuffix(v, s.from) && len(v) > len(s.from) {
				add(strings.TrimSuffix(v, s.from) + s.to)
				break
			}
		}
	}
	return out
}

// archiverWrites returns what ar and 7z, whose first word is a command
// rather than an option, write without naming it: the working directory
// they extract into (ar x, 7z x and e) unless told another (ar --output,
// 7z -o). A command word that cannot be found is judged as extracting.
func archiverWrites(base string, args []Word) []PathArg {
	cwd := []PathArg{{Path: ".", Write: true}}
	switch base {
	case "ar":
		// ar [--plugin P] [--target T] [--output DIR] [-]OP[mods] archive ...
		for i := 0; i < len(args); i++ {
			v := args[i].Value
			switch {
			case longName(v) == "output":
				return nil
			case strings.HasPrefix(v, "--"):
				if _, _, has := strings.Cut(v, "="); !has && (longName(v) == "plugin" || longName(v) == "target") {
					i++
				}
			default:
				if strings.Contains(strings.TrimPrefix(v, "-"), "x") && !hasWordPrefix(args[i+1:], "--output") {
					return cwd
				}
				return nil
			}
		}
		return cwd
	case "7z", "7za", "7zr":
		// 7z COMMAND [-switches] archive ...; switches are single words.
		if hasWordPrefix(args, "-o") {
			return nil
		}
		for _, a := range args {
			if !strings.HasPrefix(a.Value, "-") {
				if a.Value == "x" || a.Value == "e" {
					return cwd
				}
				return nil
			}
		}
		return cwd
	}
	return nil
}

// hasWordPrefix reports whether a word of args starts with prefix.
func hasWordPrefix(args []Word, prefix string) bool {
	for _, a := range args {
		if strings.HasPrefix(a.Value, prefix) {
			return true
		}
	}
	return false
}
