package cmd

// The flags of plans.Settings: registered from the table, read back into a
// plan's Options, and their rules folded into flagrules.go's.

import (
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/plans"
)

// registerSettings registers a flag per setting (onRun: only those 'plan
// apply' and 'plan resume' take), with the defaults of a new plan.
func (f *opFlags) registerSettings(c *cobra.Command, onRun bool) {
	d := plans.DefaultOptions()
	f.vals = map[string]any{}
	for _, s := range plans.Settings {
		if onRun && !s.OnRun {
			continue
		}
		f.vals[s.Flag] = registerSetting(c, s, s.Field(&d))
	}
}

// registerSetting registers s's flag with the default def (its field in a
// new plan's Options) and returns the flag's variable.
func registerSetting(c *cobra.Command, s plans.Setting, def any) any {
	fl := c.Flags()
	switch s.Kind {
	case plans.KindInt, plans.KindMillisN:
		v, d := new(int), 0
		if m, ok := def.(*plans.Millis); ok {
			d = int(*m)
		} else {
			d = *def.(*int)
		}
		fl.IntVar(v, s.Flag, d, s.Usage)
		return v
	case plans.KindInt64:
		v := new(int64)
		fl.Int64Var(v, s.Flag, *def.(*int64), s.Usage)
		return v
	case plans.KindMillis, plans.KindSeconds:
		var d time.Duration
		if m, ok := def.(*plans.Millis); ok {
			d = m.D()
		} else {
			d = time.Duration(*def.(*int64)) * time.Second
		}
		v := new(time.Duration)
		fl.DurationVar(v, s.Flag, d, s.Usage)
		return v
	case plans.KindString, plans.KindChoice:
		d := *def.(*string)
		if d == "" && len(s.Choices) > 0 {
			d = s.Choices[0]
		}
		v := new(string)
		fl.StringVar(v, s.Flag, d, s.Usage)
		return v
	case plans.KindStrings:
		v := new([]string)
		fl.StringArrayVar(v, s.Flag, *def.(*[]string), s.Usage)
		return v
	case plans.KindNegated:
		v := new(bool)
		fl.BoolVar(v, s.Flag, !*def.(*bool), s.Usage)
		return v
	}
	panic(fmt.Sprintf("setting %s: unknown kind %d", s.Flag, s.Kind))
}

// options are a new plan's Options with the flags' values.
func (f *opFlags) options() plans.Options {
	o := plans.DefaultOptions()
	for _, s := range plans.Settings {
		v, ok := f.vals[s.Flag]
		if !ok {
			continue
		}
		switch field := s.Field(&o); s.Kind {
		case plans.KindInt:
			*field.(*int) = *v.(*int)
		case plans.KindInt64:
			*field.(*int64) = *v.(*int64)
		case plans.KindMillis:
			*field.(*plans.Millis) = plans.MillisOf(*v.(*time.Duration))
		case plans.KindMillisN:
			*field.(*plans.Millis) = plans.Millis(*v.(*int))
		case plans.KindSeconds:
			*field.(*int64) = int64(v.(*time.Duration).Seconds())
		case plans.KindString:
			*field.(*string) = *v.(*string)
		case plans.KindStrings:
			*field.(*[]string) = *v.(*[]string)
		case plans.KindChoice:
			// The first choice is kept as "", as plans made before the flag have it.
			*field.(*string) = *v.(*string)
			if *v.(*string) == s.Choices[0] {
				*field.(*string) = ""
			}
		case plans.KindNegated:
			*field.(*bool) = !*v.(*bool)
		}
	}
	return o
}

// withSettings adds the rules of the settings of the given kinds to rules.
func withSettings(rules map[string]limit, kinds ...plans.Kind) map[string]limit {
	for _, s := range plans.Settings {
		if slices.Contains(kinds, s.Kind) {
			rules[s.Flag] = limit{lo: s.Lo, hi: s.Hi, off: s.Off}
		}
	}
	return rules
}

// settingChoices and settingAddrs add the choice and address rules of the settings.
func settingChoices(rules map[string][]string) map[string][]string {
	for _, s := range plans.Settings {
		if s.Kind == plans.KindChoice {
			rules[s.Flag] = s.Choices
		}
	}
	return rules
}

func settingAddrs(rules map[string]bool) map[string]bool {
	for _, s := range plans.Settings {
		if s.Addr {
			rules[s.Flag] = true
		}
	}
	return rules
}

// settingAddrWords are the words an address setting takes besides HOST:PORT.
func settingAddrWords() map[string]string {
	words := map[string]string{}
	for _, s := range plans.Settings {
		if s.AddrWord != "" {
			words[s.Flag] = s.AddrWord
		}
	}
	return words
}
