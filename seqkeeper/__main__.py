from seqkeeper.cli import main

main()
