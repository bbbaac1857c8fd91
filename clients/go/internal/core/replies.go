package core

import (
	"fmt"
	"strconv"
	"strings"
)

// ErrorKind is the class of a server's error reply.
type ErrorKind int

const (
	// OtherReply is any error reply that is none of the classes below.
	OtherReply ErrorKind = iota
	NotHeldReply
	QueueFullReply
	WrongKindReply
	NoReplicasReply
	FencedReply
	DeadlockReply
	ModuleNotLoadedReply
)

// Classify is the class of the error reply msg (the server's whole error text).
func Classify(msg string) ErrorKind {
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "NOTHELD":
		return NotHeldReply
	case "QUEUEFULL":
		return QueueFullReply
	case "WRONGKIND", "WRONGTYPE":
		return WrongKindReply
	case "NOREPLICAS":
		return NoReplicasReply
	case "FENCED":
		return FencedReply
	case "DEADLOCK":
		return DeadlockReply
	case "ERR":
		if strings.Contains(strings.ToLower(msg), "unknown command") && strings.Contains(strings.ToUpper(msg), "'DLOCK.") {
			return ModuleNotLoadedReply
		}
	}
	return OtherReply
}

// CycleStep is one step of a deadlock cycle: Owner waits on Key for WaitsFor.
type CycleStep struct {
	Owner, WaitsFor, Key string
}

// ParseCycle reads `DEADLOCK cycle: "o" waits for "p" on "k"; ...` into steps; it
// stops at the first text that is not a step.
func ParseCycle(msg string) []CycleStep {
	_, rest, ok := strings.Cut(msg, "cycle:")
	if !ok {
		return nil
	}
	var out []CycleStep
	s := rest
	for {
		s = strings.TrimLeft(s, " ")
		owner, r, ok := unquote(s)
		if !ok {
			break
		}
		r, ok = strings.CutPrefix(r, " waits for ")
		if !ok {
			break
		}
		waitsFor, r, ok := unquote(r)
		if !ok {
			break
		}
		r, ok = strings.CutPrefix(r, " on ")
		if !ok {
			break
		}
		key, r, ok := unquote(r)
		if !ok {
			break
		}
		out = append(out, CycleStep{Owner: owner, WaitsFor: waitsFor, Key: key})
		s, ok = strings.CutPrefix(r, ";")
		if !ok {
			break
		}
	}
	return out
}

// unquote takes a double-quoted string with \\ \" \n \r \t \xHH escapes off the front.
func unquote(s string) (string, string, bool) {
	if !strings.HasPrefix(s, `"`) {
		return "", s, false
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			return b.String(), s[i+1:], true
		case '\\':
			if i+1 >= len(s) {
				return "", s, false
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'x':
				if i+2 >= len(s) {
					return "", s, false
				}
				v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
				if err != nil {
					return "", s, false
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", s, false
}

// AsMap reads a RESP3 map or a RESP2 flat array (DLOCK.INFO, HGETALL) into a map.
func AsMap(v any) map[string]any {
	out := map[string]any{}
	switch m := v.(type) {
	case map[any]any:
		for k, x := range m {
			out[Str(k)] = x
		}
	case map[string]string:
		for k, x := range m {
			out[k] = x
		}
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			out[Str(m[i])] = m[i+1]
		}
	}
	return out
}

// Str is a reply value as a string ("" for nil).
func Str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

// Num is a reply value as an integer (0 when it is none).
func Num(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		return n
	}
	return 0
}
