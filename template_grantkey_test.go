package byorelay_test

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	byorelay "github.com/byorelay/byorelay"
)

// A deployment's parameters, and the template evaluated with them: the
// conditions, rules, !If branches, !Ref and !Sub of parameters that the
// grant key's wiring uses. Enough CloudFormation to read who may touch the
// key under each choice, and no more.
type deployment struct {
	p      tpl
	params map[string]string
}

func deploy(t *testing.T, over map[string]string) deployment {
	t.Helper()
	p := parseTemplate(t)
	params := map[string]string{}
	decl := at(p.root, "Parameters")
	for i := 0; i+1 < len(decl.Content); i += 2 {
		if d := at(decl.Content[i+1], "Default"); d != nil {
			params[decl.Content[i].Value] = d.Value
		}
	}
	for k, v := range over {
		if _, ok := params[k]; !ok {
			t.Fatalf("template.yaml has no parameter %s", k)
		}
		params[k] = v
	}
	return deployment{p, params}
}

// value is a scalar expression's value: a literal, a parameter's !Ref, a
// !Sub of parameters (pseudo parameters stay as written), !Select of !Split,
// or an !If. Anything else is its tag, which no assertion here matches.
func (d deployment) value(t *testing.T, n *yaml.Node) string {
	t.Helper()
	switch n.Tag {
	case "!Ref":
		if v, ok := d.params[n.Value]; ok {
			return v
		}
		return "${" + n.Value + "}"
	case "!Sub":
		return regexp.MustCompile(`\$\{([A-Za-z0-9]+)\}`).ReplaceAllStringFunc(n.Value, func(m string) string {
			if v, ok := d.params[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
	case "!Select":
		i, err := strconv.Atoi(n.Content[0].Value)
		if err != nil || n.Content[1].Tag != "!Split" {
			t.Fatalf("line %d: a !Select this test cannot read", n.Line)
		}
		split := n.Content[1].Content
		parts := strings.Split(d.value(t, split[1]), split[0].Value)
		return parts[i]
	case "!If":
		if b := d.branch(t, n); b != nil {
			return d.value(t, b)
		}
		return ""
	case "", "!!str", "!!int":
		return n.Value
	}
	return n.Tag
}

// holds is a condition's truth.
func (d deployment) holds(t *testing.T, n *yaml.Node) bool {
	t.Helper()
	switch n.Tag {
	case "!Equals":
		return d.value(t, n.Content[0]) == d.value(t, n.Content[1])
	case "!Not":
		return !d.holds(t, n.Content[0])
	case "!And", "!Or":
		and := n.Tag == "!And"
		for _, c := range n.Content {
			if d.holds(t, c) != and {
				return !and
			}
		}
		return and
	case "!Condition":
		return d.condition(t, n.Value)
	}
	t.Fatalf("line %d: a condition this test cannot read (%s)", n.Line, n.Tag)
	return false
}

func (d deployment) condition(t *testing.T, name string) bool {
	t.Helper()
	c := at(d.p.root, "Conditions", name)
	if c == nil {
		t.Fatalf("template.yaml has no condition %s", name)
	}
	return d.holds(t, c)
}

// branch is the !If's chosen branch; nil for AWS::NoValue.
func (d deployment) branch(t *testing.T, n *yaml.Node) *yaml.Node {
	t.Helper()
	b := n.Content[2]
	if d.condition(t, n.Content[0].Value) {
		b = n.Content[1]
	}
	if b.Tag == "!Ref" && b.Value == "AWS::NoValue" {
		return nil
	}
	return b
}

// ruleFailures are the descriptions of the rules' assertions that fail.
func (d deployment) ruleFailures(t *testing.T) []string {
	t.Helper()
	var failed []string
	rules := at(d.p.root, "Rules")
	for i := 0; i+1 < len(rules.Content); i += 2 {
		rule := rules.Content[i+1]
		if c := at(rule, "RuleCondition"); c != nil && !d.holds(t, c) {
			continue
		}
		for _, a := range at(rule, "Assertions").Content {
			if !d.holds(t, at(a, "Assert")) {
				failed = append(failed, at(a, "AssertDescription").Value)
			}
		}
	}
	return failed
}

// access is, per function, the variables it is given and the actions its
// policies allow (each with the resources it is allowed on), as deployed.
type access struct {
	env     map[string]map[string]string
	allowed map[string]map[string][]string
}

func (d deployment) access(t *testing.T) access {
	t.Helper()
	a := access{env: map[string]map[string]string{}, allowed: map[string]map[string][]string{}}
	res := at(d.p.root, "Resources")
	for i := 0; i+1 < len(res.Content); i += 2 {
		name, r := res.Content[i].Value, res.Content[i+1]
		if at(r, "Type").Value != "AWS::Serverless::Function" {
			continue
		}
		env := map[string]string{}
		if vars := at(r, "Properties", "Environment", "Variables"); vars != nil {
			for j := 0; j+1 < len(vars.Content); j += 2 {
				env[vars.Content[j].Value] = d.value(t, vars.Content[j+1])
			}
		}
		a.env[name] = env
		allowed := map[string][]string{}
		for _, pol := range at(r, "Properties", "Policies").Content {
			for _, st := range at(pol, "Statement").Content {
				if st.Tag == "!If" {
					if st = d.branch(t, st); st == nil {
						continue
					}
				}
				var resources []string
				for _, n := range list(at(st, "Resource")) {
					resources = append(resources, d.value(t, n))
				}
				for _, action := range list(at(st, "Action")) {
					allowed[action.Value] = append(allowed[action.Value], resources...)
				}
			}
		}
		a.allowed[name] = allowed
	}
	return a
}

func list(n *yaml.Node) []*yaml.Node {
	if n.Tag == "!If" || n.Kind != yaml.SequenceNode {
		return []*yaml.Node{n}
	}
	return n.Content
}

// who are the functions allowed action, sorted.
func (a access) who(action string) []string {
	var out []string
	for fn, allowed := range a.allowed {
		if _, ok := allowed[action]; ok {
			out = append(out, fn)
		}
	}
	slices.Sort(out)
	return out
}

// given are the functions whose variable name is not empty, sorted.
func (a access) given(name string) []string {
	var out []string
	for fn, env := range a.env {
		if env[name] != "" {
			out = append(out, fn)
		}
	}
	slices.Sort(out)
	return out
}

// readsGrantSeed are the functions allowed to read a grant-key parameter.
func (a access) readsGrantSeed(param string) []string {
	var out []string
	for fn, allowed := range a.allowed {
		for _, r := range allowed["ssm:GetParameters"] {
			if param != "" && strings.HasSuffix(r, ":parameter"+param) {
				out = append(out, fn)
			}
		}
	}
	slices.Sort(out)
	return out
}

const (
	testKMSKeyID  = "1234abcd-12ab-34cd-56ef-1234567890ab"
	testKMSKeyARN = "arn:aws:kms:eu-west-1:000000000000:key/" + testKMSKeyID
	testSeedParam = "/byorelay/grant-key"
)

var signers = []string{"CatchAllFunction", "ClaimFunction"}

// With the grant key in KMS, the functions that sign grants (claim, and
// the catch-all, which serves claims on other paths) may sign with that
// key and read its public half, the pair function may only read the
// public half, and no function may sign with it otherwise or read a grant
// seed from SSM: not even if a seed parameter is named too, which the
// template's rule refuses anyway.
func TestOnlyTheSignersMaySignWithTheKMSGrantKey(t *testing.T) {
	for _, c := range []struct{ name, key, arn string }{
		{"by key id", testKMSKeyID, "arn:${AWS::Partition}:kms:${AWS::Region}:${AWS::AccountId}:key/" + testKMSKeyID},
		{"by key ARN", testKMSKeyARN, testKMSKeyARN},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := deploy(t, map[string]string{"GrantKmsKeyId": c.key})
			if f := d.ruleFailures(t); len(f) != 0 {
				t.Fatalf("the rules refuse the KMS option alone: %q", f)
			}
			a := d.access(t)
			if got := a.who("kms:Sign"); !slices.Equal(got, signers) {
				t.Errorf("kms:Sign is allowed to %v, want %v", got, signers)
			}
			if got, want := a.who("kms:GetPublicKey"), []string{"CatchAllFunction", "ClaimFunction", "PairFunction"}; !slices.Equal(got, want) {
				t.Errorf("kms:GetPublicKey is allowed to %v, want %v", got, want)
			}
			for fn, allowed := range a.allowed {
				for action, resources := range allowed {
					if !strings.HasPrefix(action, "kms:") {
						continue
					}
					if action != "kms:Sign" && action != "kms:GetPublicKey" {
						t.Errorf("%s may %s", fn, action)
					}
					if !slices.Equal(resources, []string{c.arn}) {
						t.Errorf("%s may %s on %q, want only %q", fn, action, resources, c.arn)
					}
				}
			}
			if got, want := a.given("GRANT_KMS_KEY_ID"), []string{"CatchAllFunction", "ClaimFunction", "PairFunction"}; !slices.Equal(got, want) {
				t.Errorf("GRANT_KMS_KEY_ID is given to %v, want %v", got, want)
			}
		})
	}
	t.Run("with a seed parameter named too", func(t *testing.T) {
		d := deploy(t, map[string]string{"GrantKmsKeyId": testKMSKeyID, "GrantKeyParameter": testSeedParam})
		if f := d.ruleFailures(t); !slices.ContainsFunc(f, func(s string) bool { return strings.Contains(s, "GrantKmsKeyId") }) {
			t.Errorf("the rules let both keys through: %q", f)
		}
		a := d.access(t)
		if got := a.readsGrantSeed(testSeedParam); len(got) != 0 {
			t.Errorf("%v may read the seed although KMS holds the key", got)
		}
		if got := a.given("GRANT_KEY_PARAMETER"); len(got) != 0 {
			t.Errorf("%v are given GRANT_KEY_PARAMETER although KMS holds the key", got)
		}
	})
}

// With the seed in SSM the functions that pair and claim read it and no
// function may touch KMS; with no key, nobody reads either.
func TestTheSeedOptionGrantsNoKMSAndNoKeyGrantsNothing(t *testing.T) {
	seed := deploy(t, map[string]string{"GrantKeyParameter": testSeedParam}).access(t)
	if got, want := seed.readsGrantSeed(testSeedParam), []string{"CatchAllFunction", "ClaimFunction", "PairFunction"}; !slices.Equal(got, want) {
		t.Errorf("the seed is readable by %v, want %v", got, want)
	}
	none := deploy(t, nil).access(t)
	for name, a := range map[string]access{"the seed option": seed, "no grant key": none} {
		for fn, allowed := range a.allowed {
			for action := range maps.Keys(allowed) {
				if strings.HasPrefix(action, "kms:") {
					t.Errorf("%s: %s may %s", name, fn, action)
				}
			}
		}
		if got := a.given("GRANT_KMS_KEY_ID"); len(got) != 0 {
			t.Errorf("%s: GRANT_KMS_KEY_ID is given to %v", name, got)
		}
	}
	if got := none.given("GRANT_KEY_PARAMETER"); len(got) != 0 {
		t.Errorf("no grant key: GRANT_KEY_PARAMETER is given to %v", got)
	}
}

// cfn-lint on the template as a deploy with the grant key in KMS sees it
// (the parameter's default set): the conditional statements, the ARN
// built from a key id, the rule. `make validate` runs this.
func TestTemplateWithKMSGrantKeyPassesCfnLint(t *testing.T) {
	lint, err := exec.LookPath("cfn-lint")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("cfn-lint is missing under CI")
		}
		t.Skip("cfn-lint is not installed (pip install cfn-lint)")
	}
	for _, key := range []string{testKMSKeyID, testKMSKeyARN} {
		re := regexp.MustCompile(`(?m)(^  GrantKmsKeyId:\n(?:    .*\n)*?    Default: )\S.*$`)
		if !re.Match(byorelay.Template) {
			t.Fatal("template.yaml has no parameter GrantKmsKeyId with a Default")
		}
		path := filepath.Join(t.TempDir(), "template-kms.yaml")
		if err := os.WriteFile(path, re.ReplaceAll(byorelay.Template, []byte(`${1}"`+key+`"`)), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(lint, path).CombinedOutput(); err != nil {
			t.Fatalf("cfn-lint with GrantKmsKeyId=%s: %v\n%s", key, err, out)
		}
	}
}
