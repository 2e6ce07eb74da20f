namespace sluice::cli { int CmdBench(int, char**) { return 1; } }
