package config

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// schema describes the configuration file's shape, so that an unknown key
// or a value of the wrong type is reported with its full path
// ("webhooks.github.routes[1]: unknown key …"), which encoding/json's own
// errors do not give.
type schema struct {
	kind   valueKind
	fields map[string]*schema // kind object: the known keys
	elem   *schema            // kind mapOf, listOf: each value
}

type valueKind int

const (
	kindBool valueKind = iota
	kindInt
	kindNumber
	kindString
	kindStrings
	kindObject
	kindMapOf
	kindListOf
)

var fileSchema = func() *schema {
	handler := map[string]*schema{
		"forward":            {kind: kindString},
		"exec":               {kind: kindStrings},
		"retry_4xx":          {kind: kindBool},
		"retry_nonzero_exit": {kind: kindBool},
		"connect_timeout_s":  {kind: kindNumber},
		"timeout_s":          {kind: kindNumber},
	}
	with := func(base map[string]*schema, more map[string]*schema) map[string]*schema {
		out := map[string]*schema{}
		for k, v := range base {
			out[k] = v
		}
		for k, v := range more {
			out[k] = v
		}
		return out
	}
	route := &schema{kind: kindObject, fields: with(handler, map[string]*schema{"events": {kind: kindStrings}})}
	source := &schema{kind: kindObject, fields: with(handler, map[string]*schema{
		"enabled":  {kind: kindBool},
		"events":   {kind: kindStrings},
		"parallel": {kind: kindBool},
		"provider": {kind: kindString},
		"routes":   {kind: kindListOf, elem: route},
	})}
	return &schema{kind: kindObject, fields: map[string]*schema{
		"cloud_url":             {kind: kindString},
		"heartbeat_interval_s":  {kind: kindInt},
		"workers":               {kind: kindInt},
		"max_backoff_s":         {kind: kindNumber},
		"transport":             {kind: kindString},
		"compress":              {kind: kindBool},
		"shutdown_grace_s":      {kind: kindNumber},
		"ledger_retention_days": {kind: kindInt},
		"webhooks":              {kind: kindMapOf, elem: source},
	}}
}()

// check validates v (decoded with UseNumber) against s; path names v.
// A null stands for an absent key.
func (s *schema) check(path string, v any) error {
	if v == nil && path != "" {
		return nil
	}
	where := path
	if where == "" {
		where = "the configuration"
	}
	wrong := func(want string) error {
		return fmt.Errorf("%s: want %s, got %s", where, want, describe(v))
	}
	switch s.kind {
	case kindBool:
		if _, ok := v.(bool); !ok {
			return wrong("true or false")
		}
	case kindInt:
		n, ok := v.(json.Number)
		if !ok {
			return wrong("a whole number")
		}
		if _, err := strconv.ParseInt(n.String(), 10, 64); err != nil {
			return wrong("a whole number")
		}
	case kindNumber:
		if _, ok := v.(json.Number); !ok {
			return wrong("a number")
		}
	case kindString:
		if _, ok := v.(string); !ok {
			return wrong("a string")
		}
	case kindStrings:
		list, ok := v.([]any)
		if !ok {
			return wrong("a list of strings")
		}
		for i, e := range list {
			if _, ok := e.(string); !ok {
				return fmt.Errorf("%s[%d]: want a string, got %s", path, i, describe(e))
			}
		}
	case kindObject:
		obj, ok := v.(map[string]any)
		if !ok {
			return wrong("an object")
		}
		for _, k := range sortedKeys(obj) {
			f, known := s.fields[k]
			if !known && path == "" {
				return fmt.Errorf("unknown top-level key %q (known keys: %s)", k, strings.Join(sortedKeys(s.fields), ", "))
			}
			if !known {
				return fmt.Errorf("%s: unknown key %q (known keys: %s)", path, k, strings.Join(sortedKeys(s.fields), ", "))
			}
			if err := f.check(join(path, k), obj[k]); err != nil {
				return err
			}
		}
	case kindMapOf:
		obj, ok := v.(map[string]any)
		if !ok {
			return wrong("an object")
		}
		for _, k := range sortedKeys(obj) {
			if obj[k] == nil {
				return fmt.Errorf("%s: want an object, got null", join(path, k))
			}
			if err := s.elem.check(join(path, k), obj[k]); err != nil {
				return err
			}
		}
	case kindListOf:
		list, ok := v.([]any)
		if !ok {
			return wrong("a list")
		}
		for i, e := range list {
			if e == nil {
				return fmt.Errorf("%s[%d]: want an object, got null", path, i)
			}
			if err := s.elem.check(fmt.Sprintf("%s[%d]", path, i), e); err != nil {
				return err
			}
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		return x.String()
	case string:
		return strconv.Quote(x)
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
