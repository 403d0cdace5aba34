package robustness

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// Input is one operation of a checked history.
type Input struct {
	Op    string // "put", "get", "cas", "delete"
	Key   string
	Value string // put, cas: the value written
	Prev  string // cas: the value expected
}

// Output is what an operation returned.
type Output struct {
	Value   string // get: the value read ("" for a missing key)
	OK      bool   // cas: whether it swapped
	Unknown bool   // a write whose outcome is unknown (timeout, leader change)
}

// Model is the key-value store as porcupine checks it: one register per key
// ("" is absent). A write of unknown outcome may have taken effect or not;
// porcupine places it after everything else, as it never returned.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(string), input.(Input), output.(Output)
		switch in.Op {
		case "put":
			return true, in.Value
		case "delete":
			return true, ""
		case "get":
			return out.Value == s, s
		case "cas":
			if out.Unknown {
				if s == in.Prev {
					return true, in.Value
				}
				return true, s
			}
			if out.OK {
				return s == in.Prev, in.Value
			}
			return s != in.Prev, s
		}
		return false, s
	},
	Equal: func(a, b any) bool { return a.(string) == b.(string) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		switch in.Op {
		case "get":
			return fmt.Sprintf("get(%s) → %q", in.Key, out.Value)
		case "put":
			return fmt.Sprintf("put(%s, %s)%s", in.Key, in.Value, unknown(out))
		case "delete":
			return fmt.Sprintf("delete(%s)%s", in.Key, unknown(out))
		default:
			return fmt.Sprintf("cas(%s, %q → %s) ok=%v%s", in.Key, in.Prev, in.Value, out.OK, unknown(out))
		}
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%q", state.(string)) },
}

func unknown(o Output) string {
	if o.Unknown {
		return " (outcome unknown)"
	}
	return ""
}
