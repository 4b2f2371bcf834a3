// expected-error-re@+2 {{{{(unclosed}}}}
// expected-error-re@+1 {{{{(a|aa)+$}}}}
aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
