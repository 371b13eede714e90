module github.com/grok-go/grok

go 1.26
