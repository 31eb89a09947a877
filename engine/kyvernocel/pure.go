package kyvernocel

import (
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// The stateless libraries: user, hash, math, time, transform, gzip.

// ---- user (sdk extensions/cel/libs/user) ----
//
//	parseServiceAccount(username) → user.ServiceAccount{Name, Namespace}
//	user.parseServiceAccount(username)

var serviceAccountAdapter = sync.OnceValue(func() types.Adapter {
	reg, err := types.NewRegistry(reflect.TypeFor[ServiceAccount]())
	if err != nil {
		panic(fmt.Sprintf("kyvernocel: registering user.ServiceAccount: %v", err))
	}
	return reg
})

func userFunctions() []cel.EnvOption {
	overload := func(suffix string) cel.FunctionOpt {
		return cel.Overload("parse_service_account_string_"+suffix,
			[]*cel.Type{types.StringType}, ServiceAccountType,
			cel.UnaryBinding(parseServiceAccount))
	}
	return []cel.EnvOption{
		cel.Function("parseServiceAccount", overload("non_prefixed")),
		cel.Function("user.parseServiceAccount", overload("prefixed")),
	}
}

const saPrefix = "system:serviceaccount:"

// ParseServiceAccount splits "system:serviceaccount:<ns>:<name>"; anything
// else gives the zero ServiceAccount.
func ParseServiceAccount(username string) ServiceAccount {
	var sa ServiceAccount
	if rest, ok := strings.CutPrefix(username, saPrefix); ok {
		if ns, name, ok := strings.Cut(rest, ":"); ok {
			sa.Namespace, sa.Name = ns, name
		}
	}
	return sa
}

func parseServiceAccount(arg ref.Val) ref.Val {
	s, errVal := toString(arg)
	if errVal != nil {
		return errVal
	}
	return serviceAccountAdapter().NativeToValue(ParseServiceAccount(s))
}

// ---- hash (sdk extensions/cel/libs/hash) ----
//
//	sha1(s), sha256(s), md5(s) → hex string; hash.sha1, hash.sha256, hash.md5

func hashFunctions() []cel.EnvOption {
	fn := func(name string, newHash func() hash.Hash) []cel.EnvOption {
		binding := cel.UnaryBinding(func(arg ref.Val) ref.Val {
			s, errVal := toString(arg)
			if errVal != nil {
				return errVal
			}
			h := newHash()
			h.Write([]byte(s))
			return types.String(hex.EncodeToString(h.Sum(nil)))
		})
		return []cel.EnvOption{
			cel.Function(name, cel.Overload(name+"_string_non_prefixed", []*cel.Type{types.StringType}, types.StringType, binding)),
			cel.Function("hash."+name, cel.Overload(name+"_string_prefixed", []*cel.Type{types.StringType}, types.StringType, binding)),
		}
	}
	var out []cel.EnvOption
	out = append(out, fn("sha1", sha1.New)...)
	out = append(out, fn("sha256", sha256.New)...)
	out = append(out, fn("md5", md5.New)...)
	return out
}

// ---- math (sdk extensions/cel/libs/math) ----
//
//	math.round(double, int precision) → double

func mathFunctions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Function("math.round",
			cel.Overload("math_round_float_int", []*cel.Type{types.DoubleType, types.IntType}, types.DoubleType,
				cel.BinaryBinding(mathRound))),
	}
}

func mathRound(val, prec ref.Val) ref.Val {
	v, ok := val.(types.Double)
	if !ok {
		n, err := val.ConvertToNative(float64Type)
		if err != nil {
			return types.WrapErr(err)
		}
		v = types.Double(n.(float64))
	}
	p, ok := prec.(types.Int)
	if !ok {
		n, err := prec.ConvertToNative(int64Type)
		if err != nil {
			return types.WrapErr(err)
		}
		p = types.Int(n.(int64))
	}
	shift := math.Pow(10, float64(p))
	return types.Double(math.Round(float64(v)*shift) / shift)
}

// ---- time (sdk extensions/cel/libs/time) ----
//
//	time.now() → timestamp, time.truncate(timestamp, duration) → timestamp,
//	time.toCron(timestamp) → "minute hour day month weekday"

// Now is the clock of time.now(); tests may replace it.
var Now = time.Now

func timeFunctions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Function("time.now",
			cel.Overload("time_now", []*cel.Type{}, types.TimestampType,
				cel.FunctionBinding(func(...ref.Val) ref.Val { return types.Timestamp{Time: Now()} }))),
		cel.Function("time.truncate",
			cel.Overload("time_truncate", []*cel.Type{types.TimestampType, types.DurationType}, types.TimestampType,
				cel.BinaryBinding(func(ts, d ref.Val) ref.Val {
					t, errVal := toTime(ts)
					if errVal != nil {
						return errVal
					}
					dur, ok := d.(types.Duration)
					if !ok {
						n, err := d.ConvertToNative(reflect.TypeFor[time.Duration]())
						if err != nil {
							return types.WrapErr(err)
						}
						dur = types.Duration{Duration: n.(time.Duration)}
					}
					return types.Timestamp{Time: t.Truncate(dur.Duration)}
				}))),
		cel.Function("time.toCron",
			cel.Overload("time_to_cron", []*cel.Type{types.TimestampType}, types.StringType,
				cel.UnaryBinding(func(ts ref.Val) ref.Val {
					t, errVal := toTime(ts)
					if errVal != nil {
						return errVal
					}
					return types.String(strconv.Itoa(t.Minute()) + " " + strconv.Itoa(t.Hour()) + " " +
						strconv.Itoa(t.Day()) + " " + strconv.Itoa(int(t.Month())) + " " + strconv.Itoa(int(t.Weekday())))
				}))),
	}
}

func toTime(v ref.Val) (time.Time, ref.Val) {
	if ts, ok := v.(types.Timestamp); ok {
		return ts.Time, nil
	}
	n, err := v.ConvertToNative(reflect.TypeFor[time.Time]())
	if err != nil {
		return time.Time{}, types.WrapErr(err)
	}
	return n.(time.Time), nil
}

// ---- transform (sdk extensions/cel/libs/transform) ----
//
//	listObjToMap(keys list, values list, keyField, valueField) → map
//	transform.listObjToMap(...)
//
// Entry i of the result maps keys[i][keyField] to values[i][valueField].

func transformFunctions() []cel.EnvOption {
	overload := func(suffix string) cel.FunctionOpt {
		return cel.Overload("list_of_object_to_map_"+suffix,
			[]*cel.Type{types.ListType, types.ListType, types.StringType, types.StringType}, types.MapType,
			cel.FunctionBinding(listObjToMap))
	}
	return []cel.EnvOption{
		cel.Function("listObjToMap", overload("non_prefixed")),
		cel.Function("transform.listObjToMap", overload("prefixed")),
	}
}

func listObjToMap(args ...ref.Val) ref.Val {
	if len(args) < 4 {
		return types.WrapErr(fmt.Errorf("listObjToMap must take 4 arguments, %d were passed", len(args)))
	}
	list1, err := args[0].ConvertToNative(anySliceType)
	if err != nil {
		return types.WrapErr(err)
	}
	list2, err := args[1].ConvertToNative(anySliceType)
	if err != nil {
		return types.WrapErr(err)
	}
	keyName, errVal := toString(args[2])
	if errVal != nil {
		return errVal
	}
	valueName, errVal := toString(args[3])
	if errVal != nil {
		return errVal
	}
	keys, values := list1.([]any), list2.([]any)
	if len(keys) != len(values) {
		return types.WrapErr(fmt.Errorf("listObjToMap must take lists of equal length. list1: %d, list2: %d", len(keys), len(values)))
	}
	ret := make(map[string]any, len(keys))
	for i, entry := range keys {
		entry1, err := asStringMap(entry)
		if err != nil {
			return types.WrapErr(err)
		}
		k, ok := entry1[keyName].(string)
		if !ok {
			return types.WrapErr(fmt.Errorf("the passed key name cannot be handled as a string in the key object list"))
		}
		entry2, err := asStringMap(values[i])
		if err != nil {
			return types.WrapErr(fmt.Errorf("object cannot be handled as a map string to any in the value object list"))
		}
		ret[k] = entry2[valueName]
	}
	return types.DefaultTypeAdapter.NativeToValue(ret)
}

// asStringMap accepts what cel-go's list conversion yields for a map element:
// map[string]any (JSON data) or map[any]any (CEL map literals).
func asStringMap(v any) (map[string]any, error) {
	switch m := v.(type) {
	case map[string]any:
		return m, nil
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, v := range m {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("failed to convert key to a string, %+T", k)
			}
			out[ks] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("failed to convert key to a string, %+T", v)
}

// ---- gzip (sdk extensions/cel/libs/gzip) ----
//
//	gzip.compress(dyn string) → bytes (deterministic: mtime 0)
//	gzip.decompress(bytes)    → string

func gzipFunctions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Function("gzip.decompress",
			cel.Overload("decompress_bytes_string", []*cel.Type{types.BytesType}, types.StringType,
				cel.UnaryBinding(gzipDecompress))),
		cel.Function("gzip.compress",
			cel.Overload("compress_any_bytes", []*cel.Type{types.DynType}, types.BytesType,
				cel.UnaryBinding(gzipCompress))),
	}
}

func gzipDecompress(v ref.Val) ref.Val {
	data, ok := v.(types.Bytes)
	if !ok {
		n, err := v.ConvertToNative(bytesType)
		if err != nil {
			return types.WrapErr(err)
		}
		data = n.([]byte)
	}
	r, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return types.WrapErr(err)
	}
	defer r.Close() //nolint:errcheck
	out, err := io.ReadAll(r)
	if err != nil {
		return types.WrapErr(err)
	}
	return types.String(out)
}

func gzipCompress(v ref.Val) ref.Val {
	s, errVal := toString(v)
	if errVal != nil {
		return errVal
	}
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.ModTime = time.Unix(0, 0)
	if _, err := w.Write([]byte(s)); err != nil {
		return types.WrapErr(err)
	}
	if err := w.Close(); err != nil {
		return types.WrapErr(err)
	}
	return types.Bytes(buf.Bytes())
}
