module github.com/toolgate/toolgate

go 1.26.8

require github.com/santhosh-tekuri/jsonschema/v5 v5.3.1
