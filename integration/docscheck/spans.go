package docscheck

import (
	"regexp"
	"strings"
)

// A Span is a code span of a markdown document: the text between backquotes.
type Span struct {
	Text string
	Line int    // 1-based line of its opening backquote
	Item string // the list item or paragraph it is in
	// Section is the heading of the ### (or ##) section it is in.
	Section string
}

var fence = regexp.MustCompile("^\\s*(```|~~~)")

// Spans returns the code spans of doc outside fenced code blocks.
func Spans(doc string) []Span {
	lines := strings.Split(doc, "\n")
	inFence := false
	var blocks [][2]int // [start, end) line ranges of list items and paragraphs
	start := -1
	section := make([]string, len(lines))
	cur := ""
	for i, l := range lines {
		if fence.MatchString(l) {
			inFence = !inFence
			lines[i] = ""
			if start >= 0 {
				blocks = append(blocks, [2]int{start, i})
				start = -1
			}
			continue
		}
		if inFence {
			lines[i] = ""
			continue
		}
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "#") {
			cur = strings.TrimSpace(strings.TrimLeft(t, "#"))
		}
		section[i] = cur
		newItem := t == "" || strings.HasPrefix(t, "#") || strings.HasPrefix(l, "- ") || strings.HasPrefix(l, "* ") || strings.HasPrefix(t, "|") || isNumbered(l)
		if newItem && start >= 0 {
			blocks = append(blocks, [2]int{start, i})
			start = -1
		}
		if t != "" && start < 0 {
			start = i
		}
		if strings.HasPrefix(t, "#") || strings.HasPrefix(t, "|") {
			blocks = append(blocks, [2]int{i, i + 1})
			start = -1
		}
	}
	if start >= 0 {
		blocks = append(blocks, [2]int{start, len(lines)})
	}
	var spans []Span
	for _, b := range blocks {
		text := strings.Join(lines[b[0]:b[1]], "\n")
		for _, s := range codeSpans(text) {
			line := b[0] + strings.Count(text[:s[0]], "\n")
			spans = append(spans, Span{
				Text:    strings.TrimSpace(strings.ReplaceAll(text[s[0]:s[1]], "\n", " ")),
				Line:    line + 1,
				Item:    text,
				Section: section[line],
			})
		}
	}
	return spans
}

var numbered = regexp.MustCompile(`^\d+\. `)

func isNumbered(l string) bool { return numbered.MatchString(l) }

// codeSpans returns the [start, end) offsets of the contents of text's code
// spans: a run of backquotes up to the next run of the same length.
func codeSpans(text string) [][2]int {
	var out [][2]int
	for i := 0; i < len(text); {
		if text[i] == '\\' {
			i += 2
			continue
		}
		if text[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(text) && text[i+n] == '`' {
			n++
		}
		open := i + n
		closeAt := -1
		for j := open; j < len(text); {
			if text[j] != '`' {
				j++
				continue
			}
			m := 0
			for j+m < len(text) && text[j+m] == '`' {
				m++
			}
			if m == n {
				closeAt = j
				break
			}
			j += m
		}
		if closeAt < 0 {
			i = open
			continue
		}
		out = append(out, [2]int{open, closeAt})
		i = closeAt + n
	}
	return out
}

// NewestSection returns CHANGELOG.md's first "## " section, and the line
// its text starts on.
func NewestSection(changelog string) (string, int) {
	lines := strings.Split(changelog, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "## ") {
			if start >= 0 {
				return strings.Join(lines[start:i], "\n"), start + 1
			}
			start = i
		}
	}
	if start < 0 {
		return "", 0
	}
	return strings.Join(lines[start:], "\n"), start + 1
}

var heading = regexp.MustCompile(`(?m)^## (v\d+\.\d+\.\d+)`)

// Versions returns the versions of CHANGELOG.md's "## vX.Y.Z" headings, newest
// first.
func Versions(changelog string) []string {
	var vs []string
	for _, m := range heading.FindAllStringSubmatch(changelog, -1) {
		vs = append(vs, m[1])
	}
	return vs
}
