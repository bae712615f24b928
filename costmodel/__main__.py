from costmodel.cli.commands import main

main(prog_name="costmodel")
