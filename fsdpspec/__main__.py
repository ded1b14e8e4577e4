from fsdpspec.cli.main import main

main()
