module attributes {test.sizes = array<index: 1, 2>} {
}
