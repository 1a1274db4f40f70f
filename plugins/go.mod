module github.com/noetl/noetl/plugins

go 1.26.0
