package policy

import (
	"errors"
	"sort"
	"strings"

	"github.com/toolgate/toolgate/pkg/tooldef"
)

// knownTools are the tool names a policy may mean without anyone
// registering a tool: the built-in tools and their aliases.
func knownTools() []string {
	names := []string{"clarify"}
	for _, d := range tooldef.All() {
		names = append(names, d.Names()...)
	}
	sort.Strings(names)
	return names
}

// suggest returns the candidate closest to word by edit distance, when it
// is close enough to be a likely misspelling, or "".
func suggest(word string, candidates []string) string {
	w := strings.ToLower(word)
	best, bestDist := "", 0
	for _, c := range candidates {
		if c == w {
			return ""
		}
		d := editDistance(w, strings.ToLower(c))
		if best == "" || d < bestDist {
			best, bestDist = c, d
		}
	}
	// One edit in a short word, two in a longer one, a third of a long one.
	limit := max(1, min(len(w), len([]rune(best)))/3)
	if len(w) >= 4 {
		limit = max(limit, 2)
	}
	if best == "" || bestDist > limit {
		return ""
	}
	return best
}

// editDistance is the Damerau-Levenshtein distance (optimal string
// alignment): insertions, deletions, substitutions and transpositions of
// adjacent characters each count one.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// unknownFieldPrefix starts the message of every unknown-field problem;
// the expected keys follow in parentheses.
const unknownFieldPrefix = "unknown field (expected "

// Suggest adds a "did you mean" to the problems of a *ParseError that name
// an unknown field close to an expected one (actoin → action), and returns
// err; any other error is returned as it is.
func Suggest(err error) error {
	var pe *ParseError
	if !errors.As(err, &pe) {
		return err
	}
	for i, p := range pe.Problems {
		list, ok := strings.CutPrefix(p.Message, unknownFieldPrefix)
		if !ok || strings.Contains(p.Message, "did you mean") {
			continue
		}
		list, _, _ = strings.Cut(list, ")")
		list = strings.ReplaceAll(list, " or ", ", ")
		var expected []string
		for _, k := range strings.Split(list, ",") {
			if k = strings.TrimSpace(k); k != "" {
				expected = append(expected, k)
			}
		}
		key := p.Field
		if i := strings.LastIndex(key, "."); i >= 0 {
			key = key[i+1:]
		}
		if s := suggest(normKey(key), expected); s != "" {
			pe.Problems[i].Message = "unknown field " + key + "; did you mean " + s + "? " +
				strings.TrimPrefix(p.Message, "unknown field ")
		}
	}
	return err
}

// lintToolNames warns about tool names that are not built-in tools but
// are one or two letters away from one: most likely a misspelling, and a
// rule for a tool nobody registers never applies.
func (d *decoder) lintToolNames(p *Policy) {
	known := knownTools()
	warn := func(line int, field, name string) {
		if s := suggest(name, known); s != "" {
			d.warnf(line, field, "%q is not a built-in tool; did you mean %s? (else a tool of that name must be registered)", name, s)
		}
	}
	layers := []*layer{p.base}
	for _, o := range p.agents {
		layers = append(layers, o.layer)
	}
	for _, l := range layers {
		for _, list := range l.lists {
			for _, e := range list {
				if e.tool != "" {
					warn(e.line, e.id, e.tool)
				}
			}
		}
		for _, rules := range l.tools {
			for _, r := range rules {
				warn(r.line, l.prefix+"tools."+r.name, r.name)
			}
		}
	}
}
